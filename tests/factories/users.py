"""Users and their API tokens, made outside the app: the test client runs the app on an
event loop of its own, and database connections belong to one loop, so each call here
has an engine of its own, disposed of before it returns."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from tests.dbutil import session_on
from webapp.accounts.models import ADMIN, DEFAULT_SCOPES, User
from webapp.accounts.passwords import configured_hasher
from webapp.accounts.service import AccountService
from webapp.chat.jobs import ChatJobs
from webapp.db import Database
from webapp.stored import id_of

PASSWORD = "correct horse battery"
TEST_HASHER = configured_hasher("cheapest")
"""What the tests hash passwords with: argon2's cheapest parameters (`webapp.cli` and the
app read the setting; tests that build the account service alone pass this)."""
"""Every test user's password."""


@asynccontextmanager
async def accounts_on(database_url: str) -> AsyncIterator[AccountService]:
    """The account service on an engine of its own."""
    engine = Database(database_url)
    try:
        yield AccountService(engine, hasher=TEST_HASHER)
    finally:
        await engine.dispose()


async def accounts_call(database_url: str, method: str, *args: Any) -> Any:
    """One call of the account service, for a test that checks what the app wrote."""
    async with accounts_on(database_url) as accounts:
        return await getattr(accounts, method)(*args)


async def make_account(
    database_url: str,
    name: str,
    *,
    password: str = PASSWORD,
    admin: bool = False,
    scopes: Iterable[str] = DEFAULT_SCOPES,
    token_name: str = "script",
) -> tuple[int, str]:
    """A user and a token of theirs with `scopes` (what a token gets unless more is asked
    for, admins' too); their id and the token."""
    async with accounts_on(database_url) as accounts:
        user = await accounts.create_user(name, password, is_admin=admin)
        _, token = await accounts.create_token(id_of(user), token_name, scopes)
        return id_of(user), token


async def make_user(database_url: str, name: str, *, admin: bool = False) -> str:
    """A user and a token of theirs that may do all their role may (an admin's reaches the
    admin pages); the token."""
    scopes = [*DEFAULT_SCOPES, ADMIN] if admin else DEFAULT_SCOPES
    _, token = await make_account(database_url, name, admin=admin, scopes=scopes)
    return token


def bearer_header(token: str) -> dict[str, str]:
    """The header that signs an API call with `token`."""
    return {"Authorization": f"Bearer {token}"}


async def user_header(database_url: str, name: str, *, admin: bool = False) -> dict[str, str]:
    """A user (make_user), as the header that signs their API calls."""
    return bearer_header(await make_user(database_url, name, admin=admin))


async def add_user(chat: ChatJobs, name: str, *, admin: bool = False) -> User:
    """A user row written straight to the service's database (no password to sign in with)."""
    user = User(username=name, username_key=name.lower(), password_hash="x", is_admin=admin)
    async with session_on(chat.db, begin=True) as session:
        session.add(user)
    return user
