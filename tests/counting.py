"""What the counting tests share: the corpus of texts of every kind, and the conversation
service as the app builds it, its tokenizers probed against the serving engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.catalogs import engine_toml
from tests.factories import probed_service, service_settings_on
from tests.upstream import Engine, FakeUpstream
from webapp.chat.jobs import ChatJobs

CORPUS = Path(__file__).parent / "corpus" / "estimator"
SEPARATOR = "\n--8<--\n"
"""Samples in a corpus file are separated by this line (short.txt: one per line)."""


def corpus() -> dict[str, list[str]]:
    """Every kind of text and its samples."""
    kinds = {}
    for path in sorted(CORPUS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        if path.stem == "short":
            samples = text.splitlines()
        else:
            samples = text.removesuffix("\n").split(SEPARATOR)
        kinds[path.stem] = [sample for sample in samples if sample]
    return kinds


@asynccontextmanager
async def counting_service(
    database_url: str,
    tmp_path: Path,
    upstream: FakeUpstream,
    engine: Engine = "llamacpp",
    rate_limit: int = 0,
) -> AsyncIterator[ChatJobs]:
    """The service as the app builds it: tokenizers probed against the engine first."""
    upstream.set_engine(engine)
    path = tmp_path / "engine.toml"
    path.write_text(engine_toml(upstream), encoding="utf-8")
    # Its windows are configured (the fake's /props says less, which only warns).
    async with catalog_service(database_url, path, rate_limit, discover_windows=False) as service:
        yield service


@asynccontextmanager
async def catalog_service(
    database_url: str, path: Path, rate_limit: int = 0, *, discover_windows: bool = True
) -> AsyncIterator[ChatJobs]:
    """The service for a catalog file as the app starts it: windows left out of the file
    discovered (unless told not to), then the tokenizers probed."""
    settings = service_settings_on(
        database_url, path, rate_limit_messages=rate_limit, max_message_chars=20_000
    )
    async with probed_service(settings, discover_windows=discover_windows) as service:
        yield service
