"""The database engine and sessions.

SQLite is the embedded default and needs a few pragmas to behave under a web
server (WAL so readers never block the writer, a busy timeout instead of
instant "database is locked", foreign keys enforced). PostgreSQL needs nothing
special.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm.attributes import manager_of_class
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

Model = TypeVar("Model", bound=SQLModel)

SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA busy_timeout=10000",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def create_engine(url: str) -> AsyncEngine:
    """An async engine; for a file-backed SQLite the folder is created on first use."""
    if not is_sqlite(url):
        return create_async_engine(url, pool_pre_ping=True)
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    # Sessions always end their transaction (commit, or rollback on close), so the pool's own
    # rollback on return would only be one more round trip to the driver's thread.
    engine = create_async_engine(
        url, connect_args={"timeout": 10}, pool_reset_on_return=None, pool_use_lifo=True
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _set_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    return engine


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, class_=AsyncSession, expire_on_commit=False)


@asynccontextmanager
async def transaction(
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    """A short write transaction: committed on success, rolled back on error."""
    async with sessions() as session, session.begin():
        yield session


@asynccontextmanager
async def core_transaction(
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncConnection]:
    """A write transaction on a bare connection, for Core statements on a hot path: on
    SQLite a session's own bookkeeping costs as much as a short statement."""
    async with sessions.kw["bind"].begin() as connection:
        yield connection


def as_loaded(model: type[Model], values: Mapping[str, Any]) -> Model:
    """An instance built the way the ORM builds one from a fetched row: the values go
    straight into its state. For a row the code has just written itself, whose values
    are complete and valid already; the constructor's per-attribute bookkeeping costs
    some forty times more, and a send builds several rows. No session tracks the
    instance: to change the row later, load it in one."""
    missing = model.model_fields.keys() - values.keys()
    if missing:
        raise ValueError(f"{model.__name__} row without {', '.join(sorted(missing))}")
    instance = manager_of_class(model).new_instance()
    instance.__dict__.update(values)
    return instance  # type: ignore[no-any-return]
