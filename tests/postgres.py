"""Throwaway PostgreSQL databases, for the tests and the benchmarks: each run makes
databases of its own on the server and drops them at the end, so two runs at once never
see each other's rows."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

POSTGRES_SERVER_URL = os.environ.get(
    "WEBAPP_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
"""Names the PostgreSQL server (and who to connect as)."""


async def on_server(statement: str) -> None:
    """Run one statement outside a transaction on the server's maintenance database
    (CREATE / DROP DATABASE cannot run inside one, nor on the database they name)."""
    url = make_url(POSTGRES_SERVER_URL).set(database="postgres")
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


def reachable() -> bool:
    try:
        asyncio.run(on_server("SELECT 1"))
    except Exception:
        return False
    return True


def require() -> None:
    """In a fixture: PostgreSQL must be there under CI; elsewhere its tests are skipped."""
    if not reachable():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_SERVER_URL} (required under CI)")
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_SERVER_URL}")


@contextmanager
def throwaway_database(prefix: str) -> Iterator[str]:
    """A new, empty database named `prefix` plus this process and a random tag; its URL,
    dropped (connections and all) when the block ends."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(on_server(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_SERVER_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(on_server(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
