"""The conversation service as the app builds it, for the benchmarks that drive it without
the web layer: one place, so that each measures the same wiring the app serves with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from webapp.chat.jobs import ChatJobs, chat_jobs
from webapp.db import Database
from webapp.llm.affinity import CacheKeys
from webapp.llm.calibration import Calibrator
from webapp.llm.catalog import load_catalog
from webapp.llm.manager import LLMManager
from webapp.llm.tokenizers import Tokenizers
from webapp.settings import Settings


@asynccontextmanager
async def chat_service(
    database_url: str,
    path: Path,
    toml: str,
    *,
    keys: CacheKeys | None = None,
    **settings: Any,
) -> AsyncIterator[ChatJobs]:
    """The service on the catalog `toml` (written to `path`), tokenizers probed first, its
    text flushed every 50 ms and no rate limit; `settings` adds to the app's settings,
    `keys` are the manager's cache keys (none by default, as in tests)."""
    path.write_text(toml, encoding="utf-8")
    configured = Settings(
        database_url=database_url,
        config=path,
        stream_flush_interval=0.05,
        rate_limit_messages=0,
        **settings,
    )
    catalog = load_catalog(path)
    tokenizers = Tokenizers()
    await tokenizers.probe(catalog)
    db = Database(database_url)
    calibrator = Calibrator(db)
    await calibrator.load()
    manager = LLMManager(catalog, calibrator, tokenizers=tokenizers, keys=keys)
    chat = chat_jobs(db, manager, configured)
    try:
        yield chat
    finally:
        await chat.shutdown()
        await manager.aclose()
        await tokenizers.aclose()
        await db.dispose()
