"""Hot statements on the driver's own cursor: SQL written once, in Core, compiled once.

A Core `connection.execute` walks the statement for its cache key, builds an execution
context and a result object every time: about 0.2 ms a statement on a warm core and
0.7 ms on a cold one (the first request after an idle moment), where the driver itself
takes 0.03 to 0.17 ms. A send runs half a dozen statements and a sign-in one, so on an
idle server that machinery was most of what the app added to a first token.

A `Prepared` keeps the statement in Core (the one place its SQL is written) and, per
dialect, compiles it once into the driver's SQL, the order of its parameters, and the
same bind and result processors SQLAlchemy would apply (datetimes, JSON, booleans as
SQLite stores them): rows come back exactly as `connection.execute` returns them, as
plain tuples. It runs inside a unit of work (`webapp.db`), on that unit's connection and
transaction, so nothing about transactions changes; `Database.lookup` also runs one
on SQLite's loop-side reader.

Statements with expanding parameters (`IN` lists) are refused: their SQL differs by
the list's length, so they stay Core statements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, cast

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import BindParameter, ClauseElement
from sqlalchemy.sql.expression import Executable
from sqlalchemy.sql.selectable import ReturnsRows

Row = tuple[Any, ...]
Processor = Callable[[Any], Any] | None


class Cursor(Protocol):
    """What a DBAPI cursor offers that this module uses (sqlite3's, asyncpg's adapter)."""

    @property
    def description(self) -> object: ...

    def execute(self, operation: Any, parameters: Any = ...) -> object: ...
    def fetchall(self) -> Sequence[Sequence[Any]]: ...
    def close(self) -> object: ...


@dataclass(frozen=True, slots=True)
class _Parameter:
    name: str
    """As the compiled SQL names it (what a driver with named parameters is given)."""
    key: str
    """As the caller names it; a parameter with a default takes the caller's value if any."""
    required: bool
    default: Any
    process: Processor


@dataclass(slots=True)
class _Compiled:
    sql: str
    positional: bool
    parameters: tuple[_Parameter, ...]
    types: tuple[Any, ...]
    """The result columns' types; their processors are made at the first run, from the
    cursor's description as Core makes them (some drivers' processors need it)."""
    results: tuple[Processor, ...] | None = None

    def arguments(self, values: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        arguments = []
        for parameter in self.parameters:
            if parameter.required:
                value = values[parameter.key]
            else:
                value = values.get(parameter.key, parameter.default)
            arguments.append(parameter.process(value) if parameter.process else value)
        if self.positional:
            return arguments
        return {p.name: a for p, a in zip(self.parameters, arguments, strict=True)}

    def rows(
        self, dialect: Dialect, description: Sequence[Sequence[Any]], fetched: Sequence[Any]
    ) -> list[Row]:
        results = self.results
        if results is None:  # a text() statement has no types: its values pass as they come
            results = self.results = tuple(
                kind.dialect_impl(dialect).result_processor(dialect, column[1])
                for kind, column in zip(self.types, description, strict=bool(self.types))
            )
        if not any(results):
            return [tuple(row) for row in fetched]
        return [
            tuple(
                process(value) if process is not None else value
                for process, value in zip(results, row, strict=True)
            )
            for row in fetched
        ]


def _result_types(statement: Executable) -> list[Any]:
    """A select's columns, a DML statement's RETURNING; a text() statement declares none
    (its values come as the driver gives them, as they do through Core)."""
    if not isinstance(statement, ReturnsRows):
        return []
    return [column.type for column in statement.exported_columns]


def as_sqlalchemy_error(
    dialect: Dialect, error: Exception, sql: str, arguments: Sequence[Any] | dict[str, Any]
) -> DBAPIError:
    """A driver's exception as Core would raise it, so callers catch one family."""
    wrapped = DBAPIError.instance(
        sql, arguments, error, dialect.loaded_dbapi.Error, dialect=dialect
    )
    return cast(DBAPIError, wrapped)


class Prepared:
    """A Core statement compiled once per dialect, run on the driver's cursor (see the
    module's docstring). Parameters are passed by their bind names."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._compiled: dict[tuple[str, str], _Compiled] = {}

    @cached_property
    def names(self) -> list[str]:
        """The keys of the columns the statement returns, in order."""
        if not isinstance(self.statement, ReturnsRows):
            return []
        return [column.key for column in self.statement.exported_columns]

    def compiled(self, dialect: Dialect) -> _Compiled:
        key = (dialect.name, dialect.paramstyle)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = self._compile(dialect)
        return found

    def _compile(self, dialect: Dialect) -> _Compiled:
        compiled: Any = cast(ClauseElement, self.statement).compile(dialect=dialect)
        binds: dict[str, BindParameter[Any]] = compiled.binds
        if "POSTCOMPILE" in compiled.string or any(b.expanding for b in binds.values()):
            raise ValueError("a statement with an expanding parameter cannot be prepared")
        if any(
            getattr(compiled, f, None) for f in ("insert_prefetch", "update_prefetch", "postfetch")
        ):
            # Core computes these columns' values (Python-side defaults, onupdate) at run time.
            raise ValueError("a statement with column defaults to compute cannot be prepared")
        if any(bind.callable is not None for bind in binds.values()):
            raise ValueError("a statement with a computed parameter cannot be prepared")
        names = list(compiled.positiontup) if compiled.positional else list(binds)
        parameters = tuple(
            _Parameter(
                name=name,
                key=binds[name].key,
                required=binds[name].required,
                default=binds[name].value,
                process=binds[name].type.dialect_impl(dialect).bind_processor(dialect),
            )
            for name in names
        )
        types = tuple(_result_types(self.statement))
        return _Compiled(compiled.string, compiled.positional, parameters, types)

    def run(self, cursor: Cursor, dialect: Dialect, values: Mapping[str, Any]) -> list[Row]:
        """The statement's rows on `cursor` (none for a statement that returns none).
        The driver's errors are raised as SQLAlchemy raises them (`DBAPIError` and its
        kinds, the driver's own as `.orig`), as through Core."""
        compiled = self.compiled(dialect)
        arguments = compiled.arguments(values)
        try:
            cursor.execute(compiled.sql, arguments)
            description = cursor.description
            if description is None:
                return []
            fetched = cursor.fetchall()
        except dialect.loaded_dbapi.Error as error:
            raise as_sqlalchemy_error(dialect, error, compiled.sql, arguments) from error
        return compiled.rows(dialect, cast(Sequence[Sequence[Any]], description), fetched)

    def rows(self, connection: Connection, values: Mapping[str, Any] | None = None) -> list[Row]:
        """Run on `connection`, in the transaction it is in (a unit of work's)."""
        cursor = connection.connection.cursor()
        try:
            return self.run(cursor, connection.dialect, values or {})
        finally:
            cursor.close()

    def first(self, connection: Connection, values: Mapping[str, Any] | None = None) -> Row | None:
        found = self.rows(connection, values)
        return found[0] if found else None
