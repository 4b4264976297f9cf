"""The database: where every read and every write of the app goes.

The rule, one for the whole app: a unit of database work is a plain synchronous
function of a SQLModel `Session` (Core statements run on `session.connection()`),
handed to `Database.write` when it may write and to `Database.read` when it only
reads. Each call is one transaction: committed when the function returns, rolled
back when it raises. No other module opens a session or an engine (Alembic's
migrations keep their own, through `create_engine`).

Why synchronous work: through aiosqlite every statement costs four hops to the
driver's thread and a greenlet, which on SQLite was most of a send's time; one
hop per transaction is what the async world has to pay.

- SQLite, a file: writes run on one thread of their own and begin with `BEGIN
  IMMEDIATE`, so a write transaction holds the write lock from its first
  statement, reads included (what it read cannot change before it writes), and
  writers queue on that thread instead of on SQLite's busy timeout. Reads run on
  a small pool of other threads, each in a deferred transaction (one snapshot):
  under WAL they never wait for the writer.
- SQLite in memory (tests, scripts): one connection, one thread, for both.
- PostgreSQL (asyncpg): the work runs on the async engine's connection through
  `run_sync`, a transaction per call; writes that must not interleave take a row
  lock (the send's UPDATE of its conversation).

Keep write work short and free of waiting on anything but the database: on SQLite
every writer of the process waits for it.

One exception to "one hop per transaction": `Database.lookup`, a single prepared
statement (`webapp.prepared`) that every request runs before anything else (who is
signed in). On a SQLite file it runs on the loop itself, on a connection of its own
that only reads and never waits (WAL readers do not wait for the writer; if the file is
busy anyway, the lookup takes the reader threads' way): an indexed read by key costs
the driver 0.03-0.17 ms, where the hop to a thread and a session cost 1-2 ms on an idle
server.

A second one: `Database.write_core`, a unit of Core statements (a function of the
transaction's connection), which may be quick: a short write on a request's critical
path. On a SQLite file a quick unit runs on the loop, on a connection of its own that
begins and ends its transactions on the driver, never waits for the lock (held by the
writer thread or another process, it sends the unit to the writer thread after all) and
leaves checkpoints to the writer thread. It may go ahead of units queued for the writer
thread; those are other requests' transactions, each whole, which SQLite's lock orders
one at a time whichever thread runs them, and a request that waits for its own write (an
answer's final row) is not answered before the write commits. Which units are quick is
decided here, from what the same kind of unit cost last time (`key`: a send's
conversation), judged by its CPU time (`QUICK_UNIT`); a unit that finds it is long after
all leaves the loop (`off_the_loop`). The two hops and the session it saves cost a
single send 0.3-0.6 ms on an idle server; under a burst of 200 sends, a quarter of the
app's TTFT p99 (docs/benchmarks.md, bench-load).
"""

from __future__ import annotations

import asyncio
import contextvars
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple, cast

from sqlalchemy import Connection, Engine, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool
from sqlmodel import Session, SQLModel

from webapp.prepared import Prepared, Row

Model = TypeVar("Model", bound=SQLModel)
Result = TypeVar("Result")
Args = TypeVarTuple("Args")
Work = Callable[[Session, *Args], Result]
"""A unit of database work: a function of a session and positional arguments."""
CoreWork = Callable[[Connection, *Args], Result]
"""A unit of Core statements only (`Database.write_core`): a function of the transaction's
connection and positional arguments."""

SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA busy_timeout=10000",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)
READER_THREADS = 4
"""Reads of a file-backed SQLite database at once (WAL lets them all run beside the writer)."""
QUICK_UNIT = 0.003
"""CPU seconds under which a keyed unit counts as quick (`Database.write_core`): the next
unit of the same key may run on the loop. A send's transaction into a short conversation
takes about 1 ms of CPU; a long history's read and fit take longer, and those stay on
the writer thread, where the loop keeps its turns while they run."""
QUICK_KEYS_KEPT = 10_000
"""Keys whose last unit was quick that a process remembers (the oldest go)."""


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _set_pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


def _no_implicit_begin(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
    """The sqlite3 driver would begin only before the first write; we begin ourselves."""
    dbapi_connection.isolation_level = None


# Transactions always end (commit, or rollback on error), so a pool's own rollback on
# return would only be one more round trip to the driver.
_SQLITE_POOL: dict[str, Any] = {"pool_reset_on_return": None, "pool_use_lifo": True}


def _sqlite_engine(url: str, begin: str | None, *, waits: bool = True, **options: Any) -> Engine:
    """`begin`: the statement each transaction starts with; None for the loop's writer,
    which begins on the driver itself (`_SQLite._on_loop`). `waits`: whether the driver
    waits for a lock another connection holds (the loop's writer never does, from its
    first statement on: its connect's own pragmas included)."""
    engine = create_sync_engine(
        make_url(url).set(drivername="sqlite+pysqlite"),
        connect_args={"timeout": 10 if waits else 0, "check_same_thread": False},
        **options,
    )
    event.listen(engine, "connect", _set_pragmas)
    event.listen(engine, "connect", _no_implicit_begin)
    if begin is not None:
        event.listen(engine, "begin", _begin_with(begin))
    return engine


def _in_session(bind: Engine | Connection, work: Work[*Args, Result], /, *args: *Args) -> Result:
    """One transaction of `work`: the session flushes and commits when it returns."""
    with Session(bind=bind, expire_on_commit=False) as session, session.begin():
        return work(session, *args)


def _prepared_rows(session: Session, statement: Prepared, values: Mapping[str, Any]) -> list[Row]:
    return statement.rows(session.connection(), values)


def _busy(error: Exception) -> bool:
    """Whether SQLite refused for a lock another connection holds (raw or wrapped)."""
    raw = getattr(error, "orig", error)
    code = getattr(raw, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _begin_with(begin: str) -> Callable[[Connection], None]:
    """The engine's own BEGIN (SQLAlchemy's recipe for pysqlite, whose driver, left to
    itself, would begin only before the first write)."""

    def run(connection: Connection) -> None:
        connection.exec_driver_sql(begin)

    return run


def _loop_writing(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    """The loop's own write connection never waits for the write lock (a busy file sends
    the unit to the writer thread) and leaves checkpoints to the writer thread's commits
    (a checkpoint writes the database file: not on the loop)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.close()


def _loop_reader(path: str) -> sqlite3.Connection:
    """The connection `lookup` reads on, on the loop: each statement its own snapshot, and
    a busy file answers at once (the lookup then goes to a reader thread) instead of
    holding the loop for the busy timeout."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA busy_timeout=0")
    connection.execute("PRAGMA query_only=ON")
    return connection


def _in_connection(work: CoreWork[*Args, Result], *args: *Args) -> Callable[[Session], Result]:
    """A unit of Core statements as a session's unit: run on the session's connection."""

    def unit(session: Session) -> Result:
        return work(session.connection(), *args)

    return unit


class _Busy(Exception):
    """SQLite's write lock is held by another process: the loop does not wait for it."""


class _OffTheLoop(Exception):
    """A quick unit found it has more to do than its caller expected (`off_the_loop`)."""


_ON_THE_LOOP = contextvars.ContextVar("webapp_db_unit_on_the_loop", default=False)
"""True while a quick unit runs on the loop (the writer thread has its own context)."""


def off_the_loop() -> None:
    """For a unit that learns, from what it has read, that it is long after all: run on
    the loop (`write_core(..., quick=True)`), it is rolled back and runs again on the
    writer thread, where a long unit holds up no other request; anywhere else this does
    nothing. Whether a unit is quick is its caller's guess from the past; the rows can
    say otherwise (a send whose cut starts afresh reads and fits the whole history)."""
    if _ON_THE_LOOP.get():
        raise _OffTheLoop


class _SQLite:
    def __init__(self, url: str) -> None:
        database = make_url(url).database
        self._looking: sqlite3.Connection | None = None
        self.loop_writer: Engine | None = None
        self._held: Connection | None = None
        self._holding = threading.Lock()
        """The held connection is one loop's at a time (tests may run two loops at once)."""
        self._disposed = False
        self._quick: OrderedDict[str, None] = OrderedDict()
        """Keys whose last unit took less than `QUICK_UNIT` of CPU."""
        self.path: str | None = None
        if not database or database == ":memory:":
            # One connection holds the whole database: every transaction takes turns on it.
            engine = _sqlite_engine(url, "BEGIN", poolclass=StaticPool)
            thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
            self.writer, self.reader = engine, engine
            self.writing, self.reading = thread, thread
            return
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        self.path = database
        self.writer = _sqlite_engine(url, "BEGIN IMMEDIATE", **_SQLITE_POOL)
        self.reader = _sqlite_engine(url, "BEGIN", **_SQLITE_POOL)
        self.writing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-write")
        self.loop_writer = _sqlite_engine(url, None, waits=False, poolclass=StaticPool)
        event.listen(self.loop_writer, "connect", _loop_writing)
        self.reading = ThreadPoolExecutor(
            max_workers=READER_THREADS, thread_name_prefix="sqlite-read"
        )

    async def run(self, write: bool, work: Work[*Args, Result], *args: *Args) -> Result:
        if not write:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.reading, _in_session, self.reader, work, *args)
        engine = self.writer

        def unit() -> Result:
            return _in_session(engine, work, *args)

        return await asyncio.wrap_future(self.writing.submit(unit))

    async def write_core(
        self, work: CoreWork[*Args, Result], *args: *Args, quick: bool, key: str | None
    ) -> Result:
        if key is None:
            return await self._write_core(work, *args, quick=quick)
        # Judged by CPU time: on a busy writer thread a unit's wall time is mostly other
        # threads' turns, and what a quick unit costs the loop is its own work.
        spent = 0.0

        def timed(connection: Connection, *args: *Args) -> Result:
            nonlocal spent
            started = time.thread_time()
            try:
                return work(connection, *args)
            finally:
                spent = time.thread_time() - started

        result = await self._write_core(timed, *args, quick=quick or key in self._quick)
        self._remember(key, spent < QUICK_UNIT)
        return result

    def _remember(self, key: str, quick: bool) -> None:
        if not quick:
            self._quick.pop(key, None)
            return
        self._quick[key] = None
        self._quick.move_to_end(key)
        if len(self._quick) > QUICK_KEYS_KEPT:
            self._quick.popitem(last=False)

    async def _write_core(self, work: CoreWork[*Args, Result], *args: *Args, quick: bool) -> Result:
        engine = self.loop_writer
        on_loop = quick and not self._disposed
        if on_loop and engine is not None and self._holding.acquire(blocking=False):
            try:
                return self._on_loop(engine, work, *args)
            except _Busy:
                pass  # the lock is held (the writer thread, another process): wait there
            except _OffTheLoop:
                pass  # rolled back: the unit is long this time
            finally:
                self._holding.release()

        return await self.run(True, _in_connection(work, *args))

    def _on_loop(self, engine: Engine, work: CoreWork[*Args, Result], *args: *Args) -> Result:
        """One transaction of `work` on the loop's own connection, begun and ended on the
        driver: a session, the pool and Core's transaction would cost a unit this small
        more than its statements (0.3-0.4 ms on a cold core, against 0.1 for the
        driver's BEGIN and COMMIT). A Core statement of the work begins Core's own
        transaction inside the driver's, and ends it with it."""
        connection = self._held
        if connection is None or connection.closed or connection.invalidated:
            try:
                connection = self._held = engine.connect()
            except OperationalError as error:
                if _busy(error):
                    raise _Busy from error
                raise
        driver = connection.connection.dbapi_connection
        assert driver is not None, "a connection just checked out has its driver's"
        cursor = driver.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if _busy(error):
                raise _Busy from error
            raise
        finally:
            cursor.close()
        on_the_loop = _ON_THE_LOOP.set(True)
        try:
            result = work(connection, *args)
            if connection.in_transaction():
                connection.commit()  # the driver's commit, under Core's
            else:
                driver.commit()
        except BaseException:
            if connection.in_transaction():
                connection.rollback()
            driver.rollback()  # nothing to do if Core's rolled it back
            raise
        finally:
            _ON_THE_LOOP.reset(on_the_loop)
        return result

    async def lookup(self, statement: Prepared, values: Mapping[str, Any]) -> list[Row]:
        if self.path is None:
            return await self.run(False, _prepared_rows, statement, values)
        if self._disposed:
            raise RuntimeError("the database has been disposed of")
        try:
            if self._looking is None:
                self._looking = _loop_reader(self.path)
            cursor = self._looking.cursor()
            try:
                return statement.run(cursor, self.reader.dialect, values)
            finally:
                cursor.close()
        except (sqlite3.OperationalError, OperationalError) as error:
            if not _busy(error):
                raise
        return await self.run(False, _prepared_rows, statement, values)

    async def dispose(self) -> None:
        self._disposed = True
        for thread in {self.writing, self.reading}:
            thread.shutdown()
        if self._held is not None:
            self._held.close()
            self._held = None
        for engine in {self.writer, self.reader, self.loop_writer}:
            if engine is not None:
                engine.dispose()
        if self._looking is not None:
            self._looking.close()
            self._looking = None


class _Async:
    """Each unit runs in a task of its own that its caller only waits for, as a thread runs
    it on SQLite: a caller cancelled mid-transaction (a stopped answer, a closed stream)
    cannot interrupt the commit or the connection's return to the pool, which asyncpg
    would otherwise leave open and unpooled. `dispose` waits for the units still running."""

    def __init__(self, url: str) -> None:
        self.engine = create_async_engine(url, pool_pre_ping=True)
        self._running: set[asyncio.Task[Any]] = set()

    async def run(self, write: bool, work: Work[*Args, Result], *args: *Args) -> Result:
        def unit(connection: Connection) -> Result:
            return _in_session(connection, work, *args)

        async def transaction() -> Result:
            async with self.engine.connect() as connection:
                return await connection.run_sync(unit)

        task = asyncio.ensure_future(transaction())
        self._running.add(task)
        task.add_done_callback(self._finished)
        return await asyncio.shield(task)

    async def lookup(self, statement: Prepared, values: Mapping[str, Any]) -> list[Row]:
        return await self.run(False, _prepared_rows, statement, values)

    async def write_core(
        self, work: CoreWork[*Args, Result], *args: *Args, quick: bool, key: str | None
    ) -> Result:
        return await self.run(True, _in_connection(work, *args))

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that was cancelled no longer asks for it

    async def dispose(self) -> None:
        await asyncio.gather(*self._running, return_exceptions=True)
        await self.engine.dispose()


class Database:
    """The app's one way into its database (see the module's docstring for the rule)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = make_url(url).get_backend_name()
        self._backend = _SQLite(url) if self.dialect == "sqlite" else _Async(url)

    async def read(self, work: Work[*Args, Result], *args: *Args) -> Result:
        """Run `work(session, *args)` in a transaction that only reads."""
        return await self._backend.run(False, work, *args)

    async def lookup(self, statement: Prepared, values: Mapping[str, Any]) -> list[Row]:
        """The rows of one prepared read (see the module's docstring: on a SQLite file, read
        on the loop; elsewhere a read unit of its own)."""
        return await self._backend.lookup(statement, values)

    async def write(self, work: Work[*Args, Result], *args: *Args) -> Result:
        """Run `work(session, *args)` in a transaction that may write; on SQLite it holds
        the write lock from its first statement."""
        return await self._backend.run(True, work, *args)

    async def write_core(
        self,
        work: CoreWork[*Args, Result],
        *args: *Args,
        quick: bool = False,
        key: str | None = None,
    ) -> Result:
        """Run `work(connection, *args)`, Core statements only, in a transaction that may
        write, as `write` runs a session's. On a SQLite file whose write lock is free, a
        quick unit runs on the loop itself (see the module's docstring): one the caller
        knows to be short (`quick`), or one whose `key`'s last unit was (a unit of a key
        is judged by its own CPU time)."""
        return await self._backend.write_core(work, *args, quick=quick, key=key)

    async def dispose(self) -> None:
        await self._backend.dispose()


def create_engine(url: str) -> AsyncEngine:
    """An async engine with the app's SQLite pragmas: for Alembic's migrations and for
    scripts that load data in bulk, never for the app's own work (that is `Database`)."""
    if not is_sqlite(url):
        return create_async_engine(url, pool_pre_ping=True)
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, connect_args={"timeout": 10}, **_SQLITE_POOL)
    event.listen(engine.sync_engine, "connect", _set_pragmas)
    return engine


def as_loaded(model: type[Model], values: Mapping[str, Any]) -> Model:
    """An instance of a row the code has just written itself, whose values are complete
    and valid already: pydantic's `model_construct` takes them as they are, where the
    constructor's validation and per-attribute ORM bookkeeping cost some ten times more,
    and a send builds several rows. No session tracks the instance (nor could: it has no
    ORM state): to change the row later, load it in one."""
    missing = model.model_fields.keys() - values.keys()
    if missing:
        raise ValueError(f"{model.__name__} row without {', '.join(sorted(missing))}")
    return cast("Model", model.model_construct(**values))  # pydantic types it as SQLModel
