"""Conversations belong to a real key (SQLite and PostgreSQL): a deleted account takes its
conversations, sessions and tokens with it, and no later account inherits any of them;
existing `user:<id>` rows are converted by the migration, data kept."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from tests.dbutil import session_on
from tests.factories import PASSWORD, bearer_header
from tests.postgres import require, throwaway_database
from webapp.accounts.service import AccountService
from webapp.app import create_app
from webapp.chat.stored.models import Conversation
from webapp.db import create_engine
from webapp.migrate import upgrade
from webapp.settings import Settings


async def test_a_new_account_inherits_nothing_of_a_deleted_one(
    settings: Settings, accounts: AccountService
) -> None:
    old = await accounts.create_user("olga", PASSWORD)
    assert old.id is not None
    _, token = await accounts.create_token(old.id, "script")
    async with AsyncTestClient(app=create_app(settings)) as client:
        auth = bearer_header(token)
        created = await client.post("/api/conversations", json={"title": "private"}, headers=auth)
        assert created.status_code == 201
        assert await accounts.delete_user(old.id)
        assert (await client.get("/api/conversations", headers=auth)).status_code == 401
        new = await accounts.create_user("nora", PASSWORD)
        assert new.id is not None and new.id != old.id, "ids are never reused"
        _, fresh = await accounts.create_token(new.id, "script")
        mine = await client.get("/api/conversations", headers=bearer_header(fresh))
        assert mine.status_code == 200 and mine.json() == []
    async with session_on(accounts.db) as session:
        count = await (await session.connection()).execute(
            text("SELECT count(*) FROM conversation")
        )
        assert count.scalar_one() == 0, "the conversation went with its user"
    assert not await accounts.delete_user(old.id)


async def test_even_a_reused_id_would_find_nothing(accounts: AccountService) -> None:
    """Should an id ever come back, the foreign key already took the old rows with it."""
    user = await accounts.create_user("olga", PASSWORD)
    assert user.id is not None
    async with session_on(accounts.db, begin=True) as session:
        session.add(Conversation(owner=f"user:{user.id}", user_id=user.id, configuration="demo"))
    await accounts.delete_user(user.id)
    async with session_on(accounts.db, begin=True) as session:
        await (await session.connection()).execute(
            text(
                "INSERT INTO user_account (id, username, username_key, password_hash, is_admin,"
                " created_at) VALUES (:id, 'reuse', 'reuse', 'x', false, :now)"
            ),
            {"id": user.id, "now": datetime.now(UTC)},
        )
    async with session_on(accounts.db) as session:
        count = await (await session.connection()).execute(
            text("SELECT count(*) FROM conversation")
        )
        assert count.scalar_one() == 0


@pytest.mark.parametrize(
    "values",
    [
        {"owner": "user:999", "user_id": None},
        {"owner": "user:1", "user_id": None},
        {"owner": "embed:help:abc"},
        {"owner": "embed:help:abc", "embed_name": "help", "visitor": "xyz"},
        {"owner": "alice", "embed_name": "help", "visitor": "abc"},
    ],
)
async def test_the_database_refuses_an_owner_without_its_keys(
    accounts: AccountService, values: dict[str, Any]
) -> None:
    await accounts.create_user("alice", PASSWORD)
    with pytest.raises(IntegrityError):
        async with session_on(accounts.db, begin=True) as session:
            session.add(Conversation(configuration="demo", **values))


async def test_a_user_key_must_name_a_user(accounts: AccountService) -> None:
    with pytest.raises(IntegrityError):
        async with session_on(accounts.db, begin=True) as session:
            session.add(Conversation(owner="user:4242", user_id=4242, configuration="demo"))


# ---- the migration ---------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no schema at all, to migrate step by step."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'migrate.db'}"
        return
    require()
    with throwaway_database("webapp_migrate") as url:
        yield url


def run(url: str, statements: list[tuple[str, dict[str, object]]]) -> list[list[tuple]]:
    async def go() -> list[list[tuple]]:
        engine = create_engine(url)
        results = []
        try:
            async with engine.begin() as connection:
                for statement, params in statements:
                    result = await connection.execute(text(statement), params)
                    results.append([tuple(row) for row in result] if result.returns_rows else [])
        finally:
            await engine.dispose()
        return results

    return asyncio.run(go())


USER = (
    "INSERT INTO user_account (id, username, username_key, password_hash, is_admin, created_at)"
    " VALUES (:id, :name, :name, 'x', false, :at)"
)
CONVERSATION = (
    "INSERT INTO conversation (id, owner, configuration, title, created_at, updated_at)"
    " VALUES (:id, :owner, 'demo', 't', :at, :at)"
)
MESSAGE = (
    "INSERT INTO message (conversation_id, seq, role, content, status, created_at, updated_at,"
    " estimated_tokens) VALUES (:cid, 1, 'user', 'hello', 'complete', :at, :at, 1)"
)


def test_the_migration_converts_owners_and_keeps_every_row(empty_database: str) -> None:
    url = empty_database
    upgrade(url, "0007")
    day = datetime(2026, 1, 1, tzinfo=UTC)
    statements = [
        (USER, {"id": 1, "name": "alice", "at": day}),
        # Bob's id 2 once belonged to an account deleted before bob existed: the
        # conversation "reused" predates him, so it was not his.
        (USER, {"id": 2, "name": "bob", "at": day + timedelta(days=10)}),
        (CONVERSATION, {"id": "mine", "owner": "user:1", "at": day + timedelta(days=1)}),
        (CONVERSATION, {"id": "bobs", "owner": "user:2", "at": day + timedelta(days=11)}),
        (CONVERSATION, {"id": "reused", "owner": "user:2", "at": day + timedelta(days=2)}),
        (CONVERSATION, {"id": "gone", "owner": "user:7", "at": day}),
        (CONVERSATION, {"id": "visitor", "owner": "embed:help:abc123", "at": day}),
    ]
    ids = ("mine", "bobs", "reused", "gone", "visitor")
    statements += [(MESSAGE, {"cid": cid, "at": day}) for cid in ids]
    run(url, statements)
    upgrade(url)
    [conversations, messages] = run(
        url,
        [
            (
                "SELECT id, owner, user_id, embed_name, visitor FROM conversation ORDER BY id",
                {},
            ),
            ("SELECT conversation_id FROM message ORDER BY conversation_id", {}),
        ],
    )
    assert conversations == [
        ("bobs", "user:2", 2, None, None),
        ("gone", "former-user:7", None, None, None),
        ("mine", "user:1", 1, None, None),
        ("reused", "former-user:2", None, None, None),
        ("visitor", "embed:help:abc123", None, "help", "abc123"),
    ]
    assert messages == [(cid,) for cid in sorted(ids)], "no message was lost"
    # The keys hold from now on: deleting alice takes her conversation and its messages.
    [_, left] = run(
        url,
        [
            ("DELETE FROM user_account WHERE id = 1", {}),
            ("SELECT count(*) FROM message WHERE conversation_id = 'mine'", {}),
        ],
    )
    assert left == [(0,)]
