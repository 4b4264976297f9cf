"""Shared fixtures: databases (SQLite and PostgreSQL), the app, the fake upstream and
vendors."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.postgres import require, throwaway_database
from tests.upstream import (  # noqa: F401  (the fake OpenAI-compatible servers)
    engine_upstream,
    upstream,
)
from tests.vendors import (  # noqa: F401  (the fake Anthropic and Gemini APIs, their keys)
    vendor_keys,
    vendors,
)
from webapp.migrate import upgrade

# Titles written by the model make a call after every first answer: the tests that count
# or inspect the upstream's requests speak of sends. The tests of titles turn them on.
os.environ.setdefault("WEBAPP_MODEL_TITLES", "false")
# Hundreds of accounts are made (and signed in to) per run, here and by the servers the
# tests start: at argon2's standard cost that is minutes of CPU. Tests of the cost itself
# pass their own hasher.
os.environ.setdefault("WEBAPP_PASSWORD_HASHING", "cheapest")

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
    require()
    with throwaway_database("webapp_test") as url:
        upgrade(url)
        yield url


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
