"""Alembic environment: runs migrations over the app's async engine (SQLite or PostgreSQL)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import webapp.tables  # noqa: F401  (registers every table on SQLModel.metadata)
from webapp.db import create_engine

config = context.config
target_metadata = SQLModel.metadata


def not_search_index(
    _obj: object, name: str | None, type_: str, reflected: bool, _to: object
) -> bool:
    """Search is made by hand in 0012, not from a model: SQLite's FTS5 table (and its
    shadow tables), PostgreSQL's GIN index on the messages' text."""
    if not reflected:
        return True
    if type_ == "table":
        return not (name or "").startswith("message_search")
    return not (type_ == "index" and name == "ix_message_search")


def run_migrations(connection: Connection) -> None:
    """On SQLite, foreign keys are off while migrating: a batch migration rebuilds a table
    by copying it and dropping the old one, and with foreign keys on, that drop would
    delete (ON DELETE CASCADE) every row referring to it. SQLite's own procedure for
    schema changes; the keys are checked once the migrations are done."""
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")  # no effect inside a transaction
        connection.commit()
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=not_search_index,
        render_as_batch=sqlite,
        compare_type=True,
    )
    # What the schema was before: `webapp migrate` says whether it created, upgraded or
    # found it current (webapp.migrate.upgrade reads it back).
    config.attributes["from_revision"] = context.get_context().get_current_revision()
    with context.begin_transaction():
        context.run_migrations()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            if broken:
                raise RuntimeError(f"the migration broke foreign keys: {broken[:10]}")
    if sqlite:
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        connection.commit()


async def run_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("alembic.ini names no sqlalchemy.url and none was given")
    engine = create_engine(url)
    async with engine.connect() as connection:
        await connection.run_sync(run_migrations)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(run_online())
