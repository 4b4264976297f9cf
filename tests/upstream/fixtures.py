"""The pytest fixtures: one fake upstream per session (and one counting with Qwen's
vocabulary), reset before and after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.upstream.fake import FakeUpstream

_session_upstream: FakeUpstream | None = None


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    """The session's fake upstream (started on first use), reset before and after each test.

    Built as one fixture on a module-level server, so importing just `upstream` into a
    conftest is enough; the server stops when the pytest session ends.
    """
    global _session_upstream
    if _session_upstream is None:
        _session_upstream = FakeUpstream().start()
        request.config.add_cleanup(_stop_session_upstream)
    _session_upstream.reset()
    yield _session_upstream
    _session_upstream.reset()


def _stop_session_upstream() -> None:
    global _session_upstream
    if _session_upstream is not None:
        _session_upstream.stop()
        _session_upstream = None


_engine_upstream: FakeUpstream | None = None


@pytest.fixture
def engine_upstream(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    """A second session server that counts with Qwen's vocabulary (one the estimate was
    not fitted to); it starts as engine "openai", and tests pick theirs with
    `set_engine`. Reset before and after each test, like `upstream`."""
    global _engine_upstream
    if _engine_upstream is None:
        _engine_upstream = FakeUpstream(tokenizer="qwen").start()
        request.config.add_cleanup(_stop_engine_upstream)
    _engine_upstream.reset()
    yield _engine_upstream
    _engine_upstream.reset()


def _stop_engine_upstream() -> None:
    global _engine_upstream
    if _engine_upstream is not None:
        _engine_upstream.stop()
        _engine_upstream = None
