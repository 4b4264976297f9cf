"""The database engine and sessions.

SQLite is the embedded default and needs a few pragmas to behave under a web
server (WAL so readers never block the writer, a busy timeout instead of
instant "database is locked", foreign keys enforced). PostgreSQL needs nothing
special.

The transactions of a send run through `in_transaction`: plain synchronous Core
code, which a file-backed SQLite database runs whole on a thread of its own
with the sqlite3 driver. Through aiosqlite every statement costs four hops to
the driver's thread and a greenlet, which on SQLite is most of a send's time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm.attributes import manager_of_class
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

Model = TypeVar("Model", bound=SQLModel)
Result = TypeVar("Result")
Args = ParamSpec("Args")

SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA busy_timeout=10000",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _set_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


def _no_implicit_begin(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    dbapi_connection.isolation_level = None


def _begin_immediate(connection: Connection) -> None:
    """A transaction run by `in_transaction` holds SQLite's write lock from its first
    statement, reads included (the sqlite3 driver would begin only before the first
    write): what it reads cannot change before it writes."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


# Sessions and transactions always end (commit, or rollback on close), so a pool's own
# rollback on return would only be one more round trip to the driver.
_SQLITE_POOL = {"pool_reset_on_return": None, "pool_use_lifo": True}


class _SQLiteThread:
    """One SQLite file's `in_transaction` work, run on one thread with the sqlite3 driver.
    One thread is enough: SQLite lets one transaction write at a time anyway."""

    def __init__(self, url: str) -> None:
        self.engine = create_sync_engine(
            make_url(url).set(drivername="sqlite+pysqlite"),
            connect_args={"timeout": 10, "check_same_thread": False},
            **_SQLITE_POOL,  # type: ignore[arg-type]
        )
        event.listen(self.engine, "connect", _set_pragmas)
        event.listen(self.engine, "connect", _no_implicit_begin)
        event.listen(self.engine, "begin", _begin_immediate)
        self._thread: ThreadPoolExecutor | None = None

    async def run(
        self, work: Callable[Concatenate[Connection, Args], Result], *args: Args.args
    ) -> Result:
        def transaction() -> Result:
            with self.engine.begin() as connection:
                return work(connection, *args)

        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        return await asyncio.get_running_loop().run_in_executor(self._thread, transaction)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None
        self.engine.dispose()


_threads: WeakKeyDictionary[Engine, _SQLiteThread] = WeakKeyDictionary()


def create_engine(url: str) -> AsyncEngine:
    """An async engine; for a file-backed SQLite the folder is created on first use."""
    if not is_sqlite(url):
        return create_async_engine(url, pool_pre_ping=True)
    engine = create_async_engine(url, connect_args={"timeout": 10}, **_SQLITE_POOL)
    event.listen(engine.sync_engine, "connect", _set_pragmas)
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        thread = _threads[engine.sync_engine] = _SQLiteThread(url)
        event.listen(engine.sync_engine, "engine_disposed", lambda _engine: thread.close())
    return engine


async def in_transaction(
    sessions: async_sessionmaker[AsyncSession],
    work: Callable[Concatenate[Connection, Args], Result],
    *args: Args.args,
) -> Result:
    """Run `work(connection, *args)`, synchronous Core code, in one transaction: committed
    when it returns, rolled back when it raises. A file-backed SQLite database runs it on
    its own thread; any other database runs it on the async engine, through run_sync."""
    engine: AsyncEngine = sessions.kw["bind"]
    thread = _threads.get(engine.sync_engine)
    if thread is not None:
        return await thread.run(work, *args)
    async with engine.begin() as connection:
        return await connection.run_sync(work, *args)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, class_=AsyncSession, expire_on_commit=False)


@asynccontextmanager
async def transaction(
    sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    """A short write transaction: committed on success, rolled back on error."""
    async with sessions() as session, session.begin():
        yield session


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
