"""Managing accounts from the UI and the API (docs/design.md section 9): admins create accounts,
grant or take back admin rights, deactivate and reactivate, and reset passwords; every
user changes their own password.

The rule that matters: there is always an active admin. Taking the rights or the account
of the last one is refused by one conditional UPDATE (on PostgreSQL under a table lock,
as `create_first_admin` does), so two admins demoting each other at once cannot both win.
Deactivating ends the account's sessions and revokes its tokens in the same transaction;
so does a new password (an admin's reset, or the user's own change, which keeps only the
browser that made it signed in): whoever knew the old one, or held a token or a session
it opened, is out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, exists, text, update
from sqlmodel import Session, col, select

from webapp.accounts.models import LoginSession, User
from webapp.accounts.passwords import check_password
from webapp.accounts.service import AccountService, digest, revoke_all_tokens
from webapp.errors import Conflict, InvalidInput, NotFound

LAST_ADMIN = "the last active admin cannot be demoted or deactivated: make another admin first"


@dataclass(frozen=True, slots=True)
class Changes:
    """What `PATCH /api/admin/users/{id}` asks; None leaves a field as it is."""

    is_admin: bool | None = None
    active: bool | None = None
    password: str | None = None


def user_dict(user: User) -> dict[str, object]:
    """An account as the admin API shows it (never its password hash)."""
    return {
        "id": user.id,
        "username": user.username,
        "is_admin": user.is_admin,
        "active": user.active,
        "created_at": user.created_at.isoformat(),
        "last_login_at": user.last_login_at.isoformat() if user.last_login_at else None,
    }


class UserManagement:
    def __init__(self, accounts: AccountService) -> None:
        self.accounts = accounts

    async def list(self) -> list[User]:
        return await self.accounts.list_users()

    async def create(self, username: str, password: str, *, is_admin: bool = False) -> User:
        return await self.accounts.create_user(username, password, is_admin=is_admin)

    async def update(self, user_id: int, changes: Changes) -> User:
        """Apply `changes` to one account; the last active admin keeps rights and access."""
        if changes.is_admin is None and changes.active is None and changes.password is None:
            raise InvalidInput("nothing to change: send is_admin, active or password")
        password_hash = None
        if changes.password is not None:
            check_password(changes.password)
            password_hash = await self.accounts.passwords.hash(changes.password)

        def change(session: Session) -> User:
            connection = session.connection()
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text(f"LOCK TABLE {User.__tablename__} IN SHARE ROW EXCLUSIVE MODE")
                )
            user = session.get(User, user_id)
            if user is None:
                raise NotFound(f"no user with id {user_id}")
            if changes.is_admin is False or changes.active is False:
                other_admin = exists().where(
                    col(User.is_admin), col(User.active), col(User.id) != user_id
                )
                guarded = (
                    update(User)
                    .where(col(User.id) == user_id, ~col(User.is_admin) | other_admin)
                    .values(
                        **({"is_admin": False} if changes.is_admin is False else {}),
                        **({"active": False} if changes.active is False else {}),
                    )
                )
                if connection.execute(guarded).rowcount != 1:
                    raise Conflict(LAST_ADMIN)
            values: dict[str, object] = {}
            if changes.is_admin:
                values["is_admin"] = True
            if changes.active:
                values["active"] = True
            if password_hash is not None:
                values["password_hash"] = password_hash
            if values:
                connection.execute(update(User).where(col(User.id) == user_id).values(**values))
            if changes.active is False or password_hash is not None:
                # Whoever held the account's sessions or tokens (or its old password) is out.
                connection.execute(delete(LoginSession).where(col(LoginSession.user_id) == user_id))
                revoke_all_tokens(session, user_id)
            session.refresh(user)
            return user

        return await self.accounts.db.write(change)

    async def change_own_password(
        self, user_id: int, current: str, new: str, *, keep_session: str = ""
    ) -> None:
        """A user's own change: the current password must be right; every other session of
        theirs ends (the one making the change, `keep_session`'s secret, stays) and every
        API token of theirs is revoked."""
        user = await self.accounts.get_user(user_id)
        if user is None:
            raise NotFound("no such user")
        verdict = await self.accounts.passwords.verify(user.password_hash, current)
        if not verdict.ok:
            raise InvalidInput("the current password is wrong")
        if new == current:
            raise InvalidInput("the new password is the same as the current one")
        check_password(new)
        password_hash = await self.accounts.passwords.hash(new)

        def change(session: Session) -> None:
            connection = session.connection()
            connection.execute(
                update(User).where(col(User.id) == user_id).values(password_hash=password_hash)
            )
            connection.execute(
                delete(LoginSession).where(
                    col(LoginSession.user_id) == user_id,
                    col(LoginSession.id) != digest(keep_session),
                )
            )
            revoke_all_tokens(session, user_id)

        await self.accounts.db.write(change)

    async def list_with_last_admin(self) -> tuple[Sequence[User], int | None]:
        """Every account, and the id of the only active admin when there is just one: the
        account whose rights and access the page does not offer to take (`LAST_ADMIN`)."""
        users = await self.list()
        admins = [user.id for user in users if user.is_admin and user.active]
        return users, admins[0] if len(admins) == 1 else None

    async def active_admins(self) -> int:
        query = select(User.id).where(col(User.is_admin), col(User.active))
        return await self.accounts.db.read(lambda session: len(session.exec(query).all()))
