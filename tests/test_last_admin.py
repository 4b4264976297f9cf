"""There is always an active admin, on both databases: `webapp user delete` (and the
account service under it) refuses to delete the last one, as the admin API refuses to
demote or deactivate it (tests/test_users.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.factories import PASSWORD, TEST_HASHER, run_on
from webapp.accounts.management import Changes, UserManagement
from webapp.accounts.models import User
from webapp.accounts.service import AccountService
from webapp.db import Database
from webapp.errors import Conflict


def create(database_url: str, name: str, *flags: str) -> None:
    made = run_on(database_url, "user", "create", name, *flags, "--password-stdin", stdin=PASSWORD)
    assert made.returncode == 0, made.stderr


def names(database_url: str) -> list[str]:
    async def listed() -> list[str]:
        db = Database(database_url)
        try:
            return [
                user.username for user in await AccountService(db, hasher=TEST_HASHER).list_users()
            ]
        finally:
            await db.dispose()

    return asyncio.run(listed())


def test_the_cli_keeps_the_last_admin(database_url: str) -> None:
    create(database_url, "root", "--admin")
    create(database_url, "alice")
    refused = run_on(database_url, "user", "delete", "ROOT")
    assert refused.returncode == 1 and refused.stdout == ""
    assert "'root' is the last active admin" in refused.stderr
    assert "--admin" in refused.stderr, "it says how to go on"
    assert names(database_url) == ["alice", "root"]
    assert run_on(database_url, "user", "delete", "alice").returncode == 0
    # With a second admin, either may go; then the other is the last.
    create(database_url, "ops", "--admin")
    deleted = run_on(database_url, "user", "delete", "root")
    assert deleted.returncode == 0 and "deleted user 'root'" in deleted.stdout
    last = run_on(database_url, "user", "delete", "ops")
    assert last.returncode == 1 and "'ops' is the last active admin" in last.stderr
    assert names(database_url) == ["ops"]


async def test_a_deactivated_admin_is_not_counted_and_may_be_deleted(
    accounts: AccountService,
) -> None:
    root = await accounts.create_user("root", PASSWORD, is_admin=True)
    erin = await accounts.create_user("erin", PASSWORD, is_admin=True)
    assert root.id is not None and erin.id is not None
    await UserManagement(accounts).update(erin.id, Changes(active=False))
    with pytest.raises(Conflict, match="last active admin"):
        await accounts.delete_user(root.id)
    assert await accounts.delete_user(erin.id) is True
    assert await accounts.delete_user(erin.id) is False, "gone: no such user"
    assert [u.username for u in await accounts.list_users()] == ["root"]


async def test_two_admins_deleting_each_other_at_once_leave_one(
    accounts: AccountService,
) -> None:
    admins: list[User] = [
        await accounts.create_user(f"admin{n}", PASSWORD, is_admin=True) for n in range(2)
    ]
    ids = [admin.id for admin in admins]
    assert None not in ids
    outcomes = await asyncio.gather(
        *(accounts.delete_user(user_id) for user_id in ids if user_id is not None),
        return_exceptions=True,
    )
    assert sorted(type(outcome).__name__ for outcome in outcomes) == ["Conflict", "bool"]
    [left] = await accounts.list_users()
    assert left.is_admin and left.active


async def test_deleting_and_demoting_at_once_leave_an_admin(accounts: AccountService) -> None:
    """The delete and the admin API's demotion take the same lock (PostgreSQL) or the one
    writer (SQLite): whichever comes second sees the first's result."""
    first = await accounts.create_user("first", PASSWORD, is_admin=True)
    second = await accounts.create_user("second", PASSWORD, is_admin=True)
    assert first.id is not None and second.id is not None
    outcomes = await asyncio.gather(
        accounts.delete_user(first.id),
        UserManagement(accounts).update(second.id, Changes(is_admin=False)),
        return_exceptions=True,
    )
    assert sum(isinstance(outcome, Conflict) for outcome in outcomes) == 1, outcomes
    admins = [u for u in await accounts.list_users() if u.is_admin and u.active]
    assert len(admins) == 1
