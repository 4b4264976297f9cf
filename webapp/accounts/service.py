"""The accounts domain: who may sign in, and how a request proves who it is.

A request is authenticated either by a session cookie (browsers) or by a
bearer API token (scripts). Both are random secrets held by the client of
which the database keeps only a SHA-256 digest: high-entropy secrets need no
slow hash, only one that cannot be reversed.

Reads that authenticate a request are frequent, so the "last seen / last
used" timestamps they maintain are written at most once a minute per session
or token: on SQLite every write takes the single writer lock.
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher
from sqlalchemy import (
    Boolean,
    DateTime,
    String,
    bindparam,
    delete,
    exists,
    insert,
    literal,
    text,
    update,
)
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Executable
from sqlmodel import Session, col, select

from webapp.accounts.models import (
    ADMIN,
    CLIENT_MAX_LENGTH,
    DEFAULT_SCOPES,
    SCOPES,
    USERNAME_MAX_LENGTH,
    ApiToken,
    LoginSession,
    SignInAttempt,
    User,
    username_key,
)
from webapp.accounts.passwords import MAX_PASSWORD_LENGTH, Passwords, check_password
from webapp.db import Database, as_loaded
from webapp.errors import Conflict, InvalidInput, NotFound, TooManyRequests, refuse_nul
from webapp.limits import SlidingWindow, advisory_lock
from webapp.prepared import Prepared, Row
from webapp.timeutil import as_utc, utcnow

USERNAME_PATTERN = re.compile(rf"[A-Za-z0-9._@-]{{1,{USERNAME_MAX_LENGTH}}}")
"""ASCII only: no look-alike letters from other scripts, and case folding is plain lowercasing."""

SESSION_LIFETIME = timedelta(days=14)
TOUCH_INTERVAL = timedelta(minutes=1)
"""The least time between two writes of a session's last_seen_at or a token's last_used_at."""

SIGN_IN_FAILURES_ALLOWED = 5
SIGN_IN_FAILURE_WINDOW = timedelta(minutes=15)
"""A username that failed to sign in this many times within the window from one client
address is refused there, without a password check, until the failures leave the window."""

TOKEN_PREFIX = "wa_"
TOKEN_NAME_MAX_LENGTH = 100
MAX_SECRET_LENGTH = 256
"""Longer than any secret we issue: such input is refused before it is hashed or queried."""

LAST_ADMIN_DELETE = (
    "{name!r} is the last active admin and cannot be deleted: make another admin first "
    "(`webapp user create NAME --admin`)"
)


def digest(secret: str) -> str:
    """What the database stores for a session secret or an API token."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def check_username(username: str) -> None:
    if not USERNAME_PATTERN.fullmatch(username):
        raise InvalidInput(
            f"the username must be 1 to {USERNAME_MAX_LENGTH} characters, each a letter (a-z, "
            "A-Z), a digit or one of . _ - @"
        )


_USER_COLUMNS = list(User.__table__.columns)  # type: ignore[attr-defined]
_TOKEN_OWNER = Prepared(
    sa_select(*[*_USER_COLUMNS, col(ApiToken.id), col(ApiToken.last_used_at), col(ApiToken.scopes)])
    .join(User, col(User.id) == col(ApiToken.user_id))
    .where(
        col(ApiToken.token_hash) == bindparam("secret"),
        col(ApiToken.revoked_at).is_(None),
        col(User.active),
    )
)
_SESSION_OWNER = Prepared(
    sa_select(
        *[
            *_USER_COLUMNS,
            col(LoginSession.id),
            col(LoginSession.last_seen_at),
            col(LoginSession.expires_at),
        ]
    )
    .join(User, col(User.id) == col(LoginSession.user_id))
    .where(col(LoginSession.id) == bindparam("secret"), col(User.active))
)
"""Who a request signs in as, built once: every request asks, and building the statement
and two ORM objects each time cost more than the query itself."""


def _signed_in_by(rows: list[Row]) -> tuple[User, object, datetime | None, object] | None:
    """The user, and the id, last use and expiry (a session) or scopes (a token) of the
    row."""
    if not rows:
        return None
    (row,) = rows
    width = len(_USER_COLUMNS)
    user = as_loaded(User, {c.key: v for c, v in zip(_USER_COLUMNS, row[:width], strict=True)})
    ident, last, expires = row[width:]
    return user, ident, last, expires


@dataclass(frozen=True, slots=True)
class TokenSignIn:
    """Who a token signs in as, and what it may do."""

    user: User
    scopes: frozenset[str]


def check_scopes(scopes: Iterable[str]) -> str:
    """The stored form of a token's scopes (known names, in `SCOPES` order), or InvalidInput."""
    wanted = set(scopes)
    unknown = sorted(wanted - set(SCOPES))
    if unknown:
        raise InvalidInput(
            f"unknown token scope {unknown[0]!r}: the scopes are {', '.join(SCOPES)}"
        )
    if not wanted:
        raise InvalidInput(f"a token needs at least one scope of {', '.join(SCOPES)}")
    return " ".join(scope for scope in SCOPES if scope in wanted)


class AccountService:
    def __init__(
        self,
        db: Database,
        *,
        hasher: PasswordHasher,
        failures_allowed: int = SIGN_IN_FAILURES_ALLOWED,
        failure_window: timedelta = SIGN_IN_FAILURE_WINDOW,
    ) -> None:
        self.db = db
        self.passwords = Passwords(hasher)
        self.failures_allowed = failures_allowed
        self.failure_window = failure_window

    # Users

    async def has_users(self) -> bool:
        return await self.db.read(
            lambda session: session.exec(select(User.id).limit(1)).first() is not None
        )

    async def create_user(self, username: str, password: str, *, is_admin: bool = False) -> User:
        """Make an account; a taken username (in any letter case) is refused.

        Uniqueness is left to the database's unique constraint, not checked
        first, so two simultaneous sign-ups for one name cannot both succeed.
        """
        check_username(username)
        check_password(password)
        user = User(
            username=username,
            username_key=username_key(username),
            password_hash=await self.passwords.hash(password),
            is_admin=is_admin,
        )
        with _refused_as(InvalidInput(f"the username {username!r} is already taken")):
            await self.db.write(lambda session: session.add(user))
        return user

    async def create_first_admin(self, username: str, password: str) -> User:
        """Make the first account, an admin, signed in as it is made (its last sign-in is
        now, not "never"); `Conflict` once any account exists.

        This is what an unauthenticated set-up page calls, so it must not let a
        second caller in: the row is inserted by one `INSERT ... SELECT ...
        WHERE NOT EXISTS (any user)` statement. On SQLite a statement runs
        under the single writer lock, which makes it atomic; on PostgreSQL two
        such statements could both see an empty table, so the table is first
        locked against other writers (readers are not blocked) for the
        transaction.
        """
        check_username(username)
        check_password(password)
        password_hash = await self.passwords.hash(password)
        key = username_key(username)
        now = utcnow()  # made by the set-up page, which signs its maker in at once

        def insert_first(session: Session) -> User:
            connection = session.connection()
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text(f"LOCK TABLE {User.__tablename__} IN SHARE ROW EXCLUSIVE MODE")
                )
            values = sa_select(
                literal(username, String()),
                literal(key, String()),
                literal(password_hash, String()),
                literal(True, Boolean()),
                literal(now, DateTime(timezone=True)),
                literal(now, DateTime(timezone=True)),
            ).where(~select(User.id).exists())
            columns = ["username", "username_key", "password_hash", "is_admin", "created_at"]
            statement = insert(User).from_select([*columns, "last_login_at"], values)
            result = connection.execute(statement)
            if result.rowcount != 1:
                raise Conflict("an account already exists: sign in instead")
            return session.exec(select(User).where(User.username_key == key)).one()

        return await self.db.write(insert_first)

    async def authenticate(self, username: str, password: str, client: str = "") -> User | None:
        """The user whose credentials these are, or None; records the sign-in.

        An unknown (but possible) username costs the same time as a wrong password; a name
        no account can have costs nothing. A hash made with
        weaker parameters than today's is replaced on success. Each attempt is written
        before the password is checked; after too many failures for one username from
        one client address, attempts are refused (TooManyRequests) without checking any
        password: guessing stays slow, burning the server's CPU on Argon2 is not free,
        and nobody elsewhere can lock the account's owner out.
        """
        if len(password) > MAX_PASSWORD_LENGTH:
            return None
        if not USERNAME_PATTERN.fullmatch(username):
            # No account can have such a name, and the rule is public: answering at once
            # tells nobody anything, while a dummy check would let anyone burn a core and
            # 64 MiB per request.
            return None
        key, client = username_key(username), client[:CLIENT_MAX_LENGTH]
        attempt = await self._record_attempt(key, client)
        user = await self.get_user_by_name(username)
        verdict = await self.passwords.verify(user.password_hash if user else None, password)
        if user is None or not verdict.ok or not user.active:
            return None
        values: dict[str, object] = {"last_login_at": utcnow()}
        if verdict.new_hash is not None:
            values["password_hash"] = verdict.new_hash

        def signed_in(session: Session) -> None:
            connection = session.connection()
            connection.execute(update(User).where(col(User.id) == user.id).values(**values))
            connection.execute(
                delete(SignInAttempt).where(
                    col(SignInAttempt.username_key) == key,
                    col(SignInAttempt.client) == client,
                    col(SignInAttempt.attempted_at) <= attempt,
                )
            )

        await self.db.write(signed_in)
        for name, value in values.items():
            setattr(user, name, value)
        return user

    async def _record_attempt(self, key: str, client: str) -> datetime:
        """Write this attempt, forget those that have left the window, and refuse it if
        the ones before it in the window already reach the limit. Writing first and
        counting after, in one transaction, means parallel attempts cannot all slip
        through between a count and a check."""
        now = utcnow()
        allowed = self.failures_allowed
        if allowed <= 0:
            return now
        window = SlidingWindow(self.failure_window)
        since = window.start(now)

        def record(session: Session) -> list[datetime]:
            connection = session.connection()
            # One at a time per username and client.
            advisory_lock(connection, f"{key} {client}")
            connection.execute(
                delete(SignInAttempt).where(col(SignInAttempt.attempted_at) <= since)
            )
            session.add(SignInAttempt(username_key=key, client=client, attempted_at=now))
            session.flush()
            return list(
                session.exec(
                    select(SignInAttempt.attempted_at)
                    .where(
                        SignInAttempt.username_key == key,
                        SignInAttempt.client == client,
                        col(SignInAttempt.attempted_at) > since,
                    )
                    .order_by(col(SignInAttempt.attempted_at).desc(), col(SignInAttempt.id).desc())
                    .limit(allowed + 1)
                )
            )

        # This attempt is the newest; it may go ahead once the `allowed`-th before it has
        # left the window.
        wait = window.wait(await self.db.write(record), allowed, now)
        if wait is None:
            return now
        minutes = math.ceil(wait / 60)
        raise TooManyRequests(
            f"Too many failed sign-ins for this username; try again in "
            f"{minutes} minute{'s' if minutes != 1 else ''}.",
            retry_after=wait,
        )

    async def get_user(self, user_id: int) -> User | None:
        return await self.db.read(lambda session: session.get(User, user_id))

    async def get_user_by_name(self, username: str) -> User | None:
        """Case-insensitive: `Alice` finds `alice`."""
        if not USERNAME_PATTERN.fullmatch(username):
            return None
        query = select(User).where(User.username_key == username_key(username))
        return await self.db.read(lambda session: session.exec(query).first())

    async def delete_user(self, user_id: int) -> bool:
        """Delete an account and everything that is its own: sessions, API tokens and
        conversations go with it (ON DELETE CASCADE), so none of them works again and no
        later account can inherit them. False if there was no such user.

        The last active admin is not deleted (`Conflict`): one conditional DELETE, on
        PostgreSQL under the table lock `UserManagement.update` takes, so two admins
        deleting each other at once cannot both win (see `webapp.accounts.management`).
        """
        other_admin = exists().where(col(User.is_admin), col(User.active), col(User.id) != user_id)
        statement = delete(User).where(
            col(User.id) == user_id, ~(col(User.is_admin) & col(User.active)) | other_admin
        )

        def remove(session: Session) -> bool:
            connection = session.connection()
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text(f"LOCK TABLE {User.__tablename__} IN SHARE ROW EXCLUSIVE MODE")
                )
            if connection.execute(statement).rowcount > 0:
                return True
            kept = session.get(User, user_id)
            if kept is not None:
                raise Conflict(LAST_ADMIN_DELETE.format(name=kept.username))
            return False

        return await self.db.write(remove)

    async def list_users(self) -> list[User]:
        """Every account, by username (case-insensitively)."""
        query = select(User).order_by(col(User.username_key))
        return await self.db.read(lambda session: list(session.exec(query).all()))

    # Browser sessions

    async def start_session(self, user_id: int, *, lifetime: timedelta = SESSION_LIFETIME) -> str:
        """Open a session; returns the secret for the cookie (the database keeps its digest)."""
        secret = secrets.token_urlsafe(32)
        now = utcnow()
        login = LoginSession(
            id=digest(secret),
            user_id=user_id,
            created_at=now,
            expires_at=now + lifetime,
            last_seen_at=now,
        )
        with _refused_as(NotFound(f"no user with id {user_id}")):
            await self.db.write(lambda session: session.add(login))
        return secret

    async def user_for_session(self, secret: str) -> User | None:
        """The user a cookie's secret signs in, or None if unknown or expired."""
        found = await self._signed_in(_SESSION_OWNER, secret) if secret else None
        if found is None:
            return None
        user, login_id, last_seen_at, expires_at = found
        now = utcnow()
        if not isinstance(expires_at, datetime) or as_utc(expires_at) <= now:
            return None
        if _due(last_seen_at, now):
            await self.db.write(
                _execute,
                update(LoginSession)
                .where(col(LoginSession.id) == login_id)
                .values(last_seen_at=now),
            )
        return user

    async def end_session(self, secret: str) -> None:
        """Sign out: the secret no longer works, whether or not it ever did."""
        if not secret or len(secret) > MAX_SECRET_LENGTH:
            return
        await self.db.write(
            _execute, delete(LoginSession).where(col(LoginSession.id) == digest(secret))
        )

    async def purge_expired_sessions(self) -> int:
        """Delete expired sessions (they already stopped working); returns how many."""
        statement = delete(LoginSession).where(col(LoginSession.expires_at) <= utcnow())
        return await self.db.write(_execute, statement)

    # API tokens

    async def create_token(
        self, user_id: int, name: str, scopes: Iterable[str] = DEFAULT_SCOPES
    ) -> tuple[ApiToken, str]:
        """Issue a token; the plain token is returned now and never again.

        It may do what `scopes` say (`DEFAULT_SCOPES`: chat and the gateway); the admin
        scope is only for an admin's token, and only when asked for."""
        name = refuse_nul(name, "the token name").strip()
        if not name or len(name) > TOKEN_NAME_MAX_LENGTH:
            raise InvalidInput(f"the token name must be 1 to {TOKEN_NAME_MAX_LENGTH} characters")
        stored = check_scopes(scopes)
        plain = new_token()
        token = ApiToken(
            user_id=user_id, name=name, token_hash=digest(plain), prefix=plain[:8], scopes=stored
        )

        def issue(session: Session) -> None:
            owner = session.get(User, user_id)
            if owner is None:
                raise NotFound(f"no user with id {user_id}")
            if ADMIN in token.scope_set and not owner.is_admin:
                raise InvalidInput(
                    f"{owner.username!r} is not an admin: their token cannot have the admin scope"
                )
            session.add(token)

        with _refused_as(NotFound(f"no user with id {user_id}")):
            await self.db.write(issue)
        return token, plain

    async def user_for_token(self, token: str) -> User | None:
        """The owner of a live (not revoked) token, or None."""
        found = await self.token_sign_in(token)
        return found.user if found is not None else None

    async def token_sign_in(self, token: str) -> TokenSignIn | None:
        """The owner of a live (not revoked) token and the token's scopes, or None."""
        found = (
            await self._signed_in(_TOKEN_OWNER, token) if token.startswith(TOKEN_PREFIX) else None
        )
        if found is None:
            return None
        user, token_id, last_used_at, scopes = found
        now = utcnow()
        if _due(last_used_at, now):
            await self.db.write(
                _execute,
                update(ApiToken).where(col(ApiToken.id) == token_id).values(last_used_at=now),
            )
        return TokenSignIn(user, frozenset(str(scopes or "").split()))

    async def _signed_in(
        self, owner: Prepared, secret: str
    ) -> tuple[User, object, datetime | None, object] | None:
        """Who a cookie's secret or a token signs in as (`_signed_in_by`), or None; a
        secret longer than any issued is refused before it is hashed or queried."""
        if len(secret) > MAX_SECRET_LENGTH:
            return None
        return _signed_in_by(await self.db.lookup(owner, {"secret": digest(secret)}))

    async def list_tokens(self, user_id: int) -> list[ApiToken]:
        """The user's tokens, newest first; revoked ones included (`revoked_at` set)."""
        query = (
            select(ApiToken)
            .where(ApiToken.user_id == user_id)
            .order_by(col(ApiToken.created_at).desc(), col(ApiToken.id).desc())
        )
        return await self.db.read(lambda session: list(session.exec(query).all()))

    async def revoke_token(self, user_id: int, token_id: int) -> bool:
        """Revoke one of the user's tokens. False if it is not theirs (or does not exist).

        Revoking an already revoked token is True and keeps the first revocation time.
        """

        def revoke(session: Session) -> bool:
            token = session.get(ApiToken, token_id)
            if token is None or token.user_id != user_id:
                return False
            if token.revoked_at is None:
                token.revoked_at = utcnow()
                session.add(token)
            return True

        return await self.db.write(revoke)


def revoke_all_tokens(session: Session, user_id: int) -> None:
    """Revoke every live token of a user, in the caller's transaction (a password change,
    a reset, a deactivation: whoever held a token of the old password is out)."""
    session.connection().execute(
        update(ApiToken)
        .where(col(ApiToken.user_id) == user_id, col(ApiToken.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )


def _execute(session: Session, statement: Executable) -> int:
    """One Core statement; how many rows it changed."""
    return session.connection().execute(statement).rowcount


def _due(last: datetime | None, now: datetime) -> bool:
    """Whether a session's or token's last use is to be written now (`TOUCH_INTERVAL`)."""
    return last is None or now - as_utc(last) >= TOUCH_INTERVAL


@contextmanager
def _refused_as(error: Exception) -> Iterator[None]:
    """A write that breaks a constraint (a taken username, a user deleted meanwhile)
    raises `error`, the caller's 4xx, in place of the database's error."""
    try:
        yield
    except IntegrityError:
        raise error from None
