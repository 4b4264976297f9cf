"""Accounts: users, password sign-in, browser sessions and API tokens (no HTML here)."""

from webapp.accounts.models import ApiToken, LoginSession, User
from webapp.accounts.service import AccountService

__all__ = ["AccountService", "ApiToken", "LoginSession", "User"]
