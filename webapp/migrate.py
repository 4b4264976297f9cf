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


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the schema to `revision`. Safe to call from inside a running event loop."""
    config = alembic_config(database_url)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        command.upgrade(config, revision)
        return
    # env.py runs its own event loop; give it a thread when called from async code.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(command.upgrade, config, revision).result()
