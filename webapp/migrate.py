"""Schema migrations, applied by `webapp migrate`, by `make run`, and by the test fixtures."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> str | None:
    """Bring the schema to `revision`. Safe to call from inside a running event loop.
    Returns the revision the database was at before (None: it had no schema)."""
    config = alembic_config(database_url)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        command.upgrade(config, revision)
    else:
        # env.py runs its own event loop; give it a thread when called from async code.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(command.upgrade, config, revision).result()
    before: str | None = config.attributes.get("from_revision")
    return before


def head_revision() -> str | None:
    """The newest migration's revision."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def upgrade_report(before: str | None, after: str | None) -> str:
    """What `webapp migrate` says it did: a new database is not "up to date"."""
    if before is None:
        return f"created the schema (revision {after})"
    if before != after:
        return f"upgraded the schema from revision {before} to {after}"
    return f"the schema is up to date (revision {after})"
