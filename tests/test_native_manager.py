"""The send pipeline in front of Claude and Gemini (the fakes of tests/vendors/), over
real HTTP: a prompt the vendor refuses as too long teaches the model's window (stored as
its calibration's `learned_window`) and the re-fitted retry goes through, once; an
overload or a rate limit falls back to the next model, as on every other kind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.factories import collect, finished, long_transcript
from tests.vendors import FakeVendors, providers_toml
from webapp.db import Database
from webapp.llm.calibration import Calibrator, learned_windows
from webapp.llm.catalog import load_catalog
from webapp.llm.manager import AllModelsFailed, Fitted, LLMManager
from webapp.llm.providers.base import ContextLengthExceeded, RateLimited
from webapp.llm.tokenizers import Tokenizers

CATALOG_WINDOW = 8192
"""What the catalog believes; the fakes' claude-small and gemini-small take 4,096."""

MODELS = "".join(
    f"""
[[models]]
name = "{name}"
provider = "{provider}"
model_id = "{name}-small"
context_window = {CATALOG_WINDOW}
max_output_tokens = 200

[[configurations]]
name = "{name}"
model = "{name}"
fallbacks = ["{other}"]
"""
    for name, provider, other in (("claude", "claude", "gemini"), ("gemini", "google", "claude"))
)


@pytest.fixture
async def manager(
    vendors: FakeVendors, vendor_keys: None, tmp_path: Path, sqlite_url: str
) -> AsyncIterator[LLMManager]:
    """Counted by the vendors' count-tokens endpoints, calibration stored in SQLite."""
    path = tmp_path / "native.toml"
    path.write_text(providers_toml(vendors) + MODELS, encoding="utf-8")
    catalog = load_catalog(path)
    db = Database(sqlite_url)
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        manager = LLMManager(catalog, Calibrator(db), tokenizers=tokenizers)
        yield manager
        await manager.aclose()
    await db.dispose()


@pytest.mark.parametrize("name", ["claude", "gemini"])
async def test_a_refusal_as_too_long_teaches_the_window_and_the_retry_goes_through(
    manager: LLMManager, vendors: FakeVendors, sqlite_url: str, name: str
) -> None:
    events = await collect(manager, name, long_transcript(80))
    # The plan's fit, estimated; then (the history counted by the vendor) the fit sent and
    # refused; then the retry's, fitted to the window the refusal named.
    fits = [e.fit for e in events if isinstance(e, Fitted)]
    assert [f.window for f in fits] == [CATALOG_WINDOW, CATALOG_WINDOW, 4096]
    assert fits[-1].dropped_turns > fits[-2].dropped_turns
    assert finished(events).model == name
    sent = vendors.generations()
    assert len(sent) == 2, "one refusal, one re-fitted retry"
    assert vendors.prompt_tokens(sent[-1]) <= fits[-1].budget
    assert manager.calibrator.window(name) == 4096
    db = Database(sqlite_url)  # stored: a restart fits to it from its first send
    assert (name, 4096) in await db.read(learned_windows)
    await db.dispose()
    # Bounded: a vendor that refuses the re-fitted prompt too fails the call, after two.
    vendors.reset()
    vendors.set_window(f"{name}-small", 60)
    with pytest.raises(ContextLengthExceeded) as raised:
        await collect(manager, name, long_transcript(80))
    assert raised.value.limit == 60 and len(vendors.generations()) == 2


@pytest.mark.parametrize(
    ("name", "status", "retry_after"),
    [("claude", 529, None), ("claude", 429, 7), ("gemini", 503, None), ("gemini", 429, 7)],
)
async def test_overloads_and_rate_limits_fall_back_to_the_next_model(
    manager: LLMManager, vendors: FakeVendors, name: str, status: int, retry_after: int | None
) -> None:
    """529 overloaded_error, 429 rate_limit_error with retry-after; Gemini's UNAVAILABLE
    and RESOURCE_EXHAUSTED with its RetryInfo. When every model is refused, the wait the
    last one named is the caller's."""
    other = "gemini" if name == "claude" else "claude"
    vendors.fail_next(status, retry_after=retry_after)
    events = await collect(manager, name, long_transcript(3))
    fitted = [e.fit.model for e in events if isinstance(e, Fitted)]
    assert fitted[0] == name and fitted[-1] == other  # re-fitted to the fallback's window
    assert finished(events).model == other and len(vendors.generations()) == 2
    if status != 429:
        return
    vendors.fail_next(429, count=2, retry_after=retry_after)
    with pytest.raises(AllModelsFailed) as raised:
        await collect(manager, name, long_transcript(3))
    assert [type(error) for _, error in raised.value.errors] == [RateLimited, RateLimited]
    assert raised.value.retry_after == retry_after
