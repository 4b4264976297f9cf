"""Accounts: users, their browser sessions and their API tokens.

Secrets never reach the database in the clear: a session row's id and a
token row's `token_hash` are SHA-256 digests of the secret the client holds,
so a leaked database (or backup) lets nobody sign in. Passwords are Argon2id
hashes (see `passwords.py`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    true,
)
from sqlmodel import Field, SQLModel

from webapp.timeutil import utcnow

USERNAME_MAX_LENGTH = 64
CLIENT_MAX_LENGTH = 64

# What an API token may do. A signed-in browser may do everything its user may.
CHAT = "chat"
"""The JSON API and the pages: conversations, search, reading one's own settings."""
GATEWAY = "gateway"
"""The OpenAI-compatible gateway under /v1."""
ADMIN = "admin"
"""What only admins may do (the admin pages and /api/admin); only an admin's token has it."""
TOKENS = "tokens"
"""Creating and revoking the account's tokens: without it a token can never mint another."""
SETTINGS = "settings"
"""Changing the account's settings (preferences, custom instructions, password): a chat
token, which a script holds, cannot rewrite what every later send carries or lock its
owner out."""
SCOPES = (CHAT, GATEWAY, ADMIN, TOKENS, SETTINGS)
DEFAULT_SCOPES = (CHAT, GATEWAY)
"""What a token gets unless more is asked for when it is made."""
SCOPES_MAX_LENGTH = 100


def username_key(username: str) -> str:
    """The form usernames are compared in: `Alice` and `alice` are one account.

    Usernames are ASCII only (see `service.USERNAME_PATTERN`), so plain
    lowercasing is unambiguous and gives the same answer in Python, SQLite and
    PostgreSQL. It is stored in its own unique column rather than as an index
    on lower(): a plain unique constraint behaves alike on both databases and
    Alembic autogenerates it faithfully.
    """
    return username.lower()


def _timestamp(*, nullable: bool = False) -> Column[datetime]:
    if nullable:
        return Column(DateTime(timezone=True), nullable=True)
    return Column(DateTime(timezone=True), nullable=False, default=utcnow)


def _owner() -> Column[int]:
    """A user reference that disappears with its user (sessions and tokens die with it)."""
    return Column(Integer, ForeignKey("user_account.id", ondelete="CASCADE"), nullable=False)


class User(SQLModel, table=True):
    # "user" is a reserved word in PostgreSQL: a different name spares quoting in raw SQL.
    __tablename__ = "user_account"
    __table_args__ = (
        UniqueConstraint("username_key", name="uq_user_account_username_key"),
        # SQLite would otherwise give a new account the id of the newest deleted one.
        {"sqlite_autoincrement": True},
    )

    id: int | None = Field(default=None, primary_key=True)
    username: str = Field(max_length=USERNAME_MAX_LENGTH)
    """As the user typed it when the account was made; shown back as such."""
    username_key: str = Field(max_length=USERNAME_MAX_LENGTH)
    """`username_key(username)`: what uniqueness and look-ups use."""
    password_hash: str = Field(max_length=255, exclude=True, repr=False)
    """Argon2id; excluded from dumps and reprs so it cannot leak into JSON or logs by accident."""
    is_admin: bool = False
    active: bool = Field(
        default=True, sa_column=Column(Boolean, nullable=False, default=True, server_default=true())
    )
    """False once an admin deactivated the account: it cannot sign in, and no session or
    token of it works; its conversations stay."""
    created_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    last_login_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    # The user's own settings (webapp.accounts.preferences), read with the session at no
    # extra cost: every page is drawn in the user's theme.
    default_configuration: str | None = Field(default=None, max_length=100)
    """The configuration new conversations start with; NULL (or one no longer in the
    catalog): the catalog's default."""
    theme: str = Field(
        default="system",
        sa_column=Column(String(8), nullable=False, default="system", server_default="system"),
    )
    custom_instructions: str = Field(
        default="", sa_column=Column(Text, nullable=False, default="", server_default="")
    )
    """Sent with the configuration's system prompt on every send of the user's chats."""


class LoginSession(SQLModel, table=True):
    """A signed-in browser. The cookie carries the secret; `id` is its SHA-256 hex digest."""

    __tablename__ = "login_session"
    __table_args__ = (
        Index("ix_login_session_user_id", "user_id"),
        Index("ix_login_session_expires_at", "expires_at"),
    )

    id: str = Field(primary_key=True, max_length=64)
    user_id: int = Field(sa_column=_owner())
    created_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    expires_at: datetime = Field(sa_column=_timestamp())
    """Absolute: activity does not extend a session, so a stolen cookie has a bounded life."""
    last_seen_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    """Refreshed at most once a minute (see `AccountService.user_for_session`)."""


class ApiToken(SQLModel, table=True):
    """A bearer token for scripts. Only its digest is kept; the plain token is shown once."""

    __tablename__ = "api_token"
    __table_args__ = (
        UniqueConstraint("token_hash", name="uq_api_token_token_hash"),
        Index("ix_api_token_user_id", "user_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(sa_column=_owner())
    name: str = Field(max_length=100)
    token_hash: str = Field(max_length=64)
    prefix: str = Field(max_length=8)
    """The token's first 8 characters (`wa_` and 5 more), so a user can tell tokens apart."""
    created_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    last_used_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    revoked_at: datetime | None = Field(default=None, sa_column=_timestamp(nullable=True))
    scopes: str = Field(
        default=" ".join(DEFAULT_SCOPES),
        sa_column=Column(
            String(SCOPES_MAX_LENGTH),
            nullable=False,
            default=" ".join(DEFAULT_SCOPES),
            server_default=" ".join(DEFAULT_SCOPES),
        ),
    )
    """What the token may do: scope names (`SCOPES`) separated by spaces. Tokens made
    before scopes existed got the default ones."""

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def scope_set(self) -> frozenset[str]:
        return frozenset(self.scopes.split())


class SignInAttempt(SQLModel, table=True):
    """A sign-in attempt for a username from one client address, written before the password
    is checked and deleted when it succeeds: what remains are failures (and attempts in
    flight), which the throttle counts. Kept for the throttle's window only. The username
    need not exist, so the throttle says nothing about which names are taken."""

    __tablename__ = "sign_in_attempt"
    __table_args__ = (
        Index("ix_sign_in_attempt_key_client_time", "username_key", "client", "attempted_at"),
        Index("ix_sign_in_attempt_time", "attempted_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    username_key: str = Field(max_length=USERNAME_MAX_LENGTH)
    client: str = Field(default="", max_length=CLIENT_MAX_LENGTH)
    """The client's address as the server saw it (behind a proxy: the proxy's)."""
    attempted_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
