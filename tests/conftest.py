"""Shared fixtures: databases (SQLite and PostgreSQL), the app, the fake upstream."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tests.upstream import (  # noqa: F401  (the fake OpenAI-compatible servers)
    engine_upstream,
    upstream,
)
from webapp.migrate import upgrade

POSTGRES_SERVER_URL = os.environ.get(
    "WEBAPP_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
"""Names the PostgreSQL server (and who to connect as). Each test run makes a database of
its own there and drops it at the end, so two runs at once never see each other's rows."""
TABLES = (
    "message",
    "conversation",
    "model_calibration",
    "api_token",
    "login_session",
    "sign_in_attempt",
    "embed_send",
    "gateway_call",
    "user_account",
)


async def _on_server(statement: str) -> None:
    """Run one statement outside a transaction on the server's maintenance database
    (CREATE / DROP DATABASE cannot run inside one, nor on the database they name)."""
    url = make_url(POSTGRES_SERVER_URL).set(database="postgres")
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


def _postgres_reachable() -> bool:
    try:
        asyncio.run(_on_server("SELECT 1"))
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file; each test gets a copy, so migrations run once per session."""
    path = tmp_path_factory.mktemp("db") / "template.db"
    upgrade(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL database of this run's own, migrated from scratch, dropped at the end.
    Under CI the server must be there."""
    if not _postgres_reachable():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_SERVER_URL} (required under CI)")
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_SERVER_URL}")
    name = f"webapp_test_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(_on_server(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_SERVER_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        asyncio.run(_on_server(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def truncate_tables(url: str) -> None:
    """Empty every table of the app (the schema stays), for a test that needs a clean slate."""
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    await engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> Iterator[str]:
    """Each test that takes this runs on both databases, each time on an empty schema."""
    if request.param == "sqlite":
        path = tmp_path / "webapp.db"
        shutil.copy(sqlite_template, path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    url = request.getfixturevalue("postgres_url")
    asyncio.run(truncate_tables(url))
    yield url


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """For tests about behaviour that does not depend on the database."""
    path = tmp_path / "webapp.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def no_running_tasks() -> AsyncIterator[None]:
    yield
    pending = [t for t in asyncio.all_tasks() if t.get_name().startswith("answer-")]
    assert not pending, f"answers still running after the test: {pending}"
