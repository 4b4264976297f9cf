"""A session of the tests' own on the app's database, for setting up or inspecting rows as
an outside observer would (the app itself goes through `webapp.db.Database`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel.ext.asyncio.session import AsyncSession

from webapp.db import Database, create_engine

Result = TypeVar("Result")


@asynccontextmanager
async def session_on(db: Database, *, begin: bool = False) -> AsyncIterator[AsyncSession]:
    """With `begin`, one transaction, committed when the block ends without error."""
    engine = create_engine(db.url)
    try:
        async with AsyncSession(engine, expire_on_commit=False) as session:
            if begin:
                async with session.begin():
                    yield session
            else:
                yield session
    finally:
        await engine.dispose()


async def written(engine: AsyncEngine, work: Callable[[Connection], Result]) -> Result:
    """`work(connection)` run as the app runs a write: `Database.write`, on the database
    `engine` names (through a `Database` of its own)."""
    db = Database(engine.url.render_as_string(hide_password=False))
    try:
        return await db.write(lambda session: work(session.connection()))
    finally:
        await db.dispose()
