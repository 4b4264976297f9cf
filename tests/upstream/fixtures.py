"""The pytest fixtures: one fake upstream per session (and one counting with Qwen's
vocabulary), reset before and after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

import pytest

from tests.upstream.fake import FakeUpstream


class _Fake(Protocol):
    def reset(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Fake)


class SessionServer(Generic[S]):
    """A fake server for the whole pytest session, on a module-level object so that
    importing just its fixture into a conftest is enough: started by the first test that
    asks for it, stopped when the session ends, reset before and after each test."""

    def __init__(self, start: Callable[[], S]) -> None:
        self._start = start
        self._server: S | None = None

    def around(self, request: pytest.FixtureRequest) -> Iterator[S]:
        """The server, for one test (a fixture's body: `yield from`)."""
        if self._server is None:
            self._server = self._start()
            request.config.add_cleanup(self._stop)
        self._server.reset()
        yield self._server
        self._server.reset()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


_upstream = SessionServer(lambda: FakeUpstream().start())
_engine_upstream = SessionServer(lambda: FakeUpstream(tokenizer="qwen").start())


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    """The session's fake upstream (started on first use), reset before and after each test."""
    yield from _upstream.around(request)


@pytest.fixture
def engine_upstream(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    """A second session server that counts with Qwen's vocabulary (one the estimate was
    not fitted to); it starts as engine "openai", and tests pick theirs with
    `set_engine`. Reset before and after each test, like `upstream`."""
    yield from _engine_upstream.around(request)
