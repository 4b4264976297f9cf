"""The accounts' app-wide dependency (`create_app` provides it), named as handlers declare
it (see webapp.web.deps for why it is an alias)."""

from __future__ import annotations

from litestar.di import NamedDependency

from webapp.accounts.service import AccountService

Accounts = NamedDependency[AccountService]
"""This process's account service (`accounts`): sign-in, sessions, tokens and users."""
