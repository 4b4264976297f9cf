"""The conversation service on the tiny catalog, against the fake upstream, on SQLite and
PostgreSQL (through `database_url`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.catalogs import write_upstream_catalog
from tests.test_service import build_service, close_service
from tests.tiny import TINY
from tests.upstream import FakeUpstream
from webapp.chat.service import ConversationService
from webapp.settings import Settings


@pytest.fixture
def settings(database_url: str, tmp_path: Path, upstream: FakeUpstream) -> Settings:
    return Settings(
        database_url=database_url,
        config=write_upstream_catalog(tmp_path / "catalog.toml", upstream, TINY),
        stream_flush_interval=0.05,
        rate_limit_messages=0,
    )


@pytest.fixture
async def chat(settings: Settings) -> AsyncIterator[ConversationService]:
    service = await build_service(settings)
    yield service
    await close_service(service)
