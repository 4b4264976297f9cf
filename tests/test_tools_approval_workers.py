"""A decision on a tool call taken by another worker than the one writing the answer, on
two real `webapp serve` processes: on PostgreSQL it is forwarded by a notice, as Stop is,
and the writer runs the call; SQLite has no notices, so the other worker says it cannot
tell the writer (409) and the writer's own decision still counts."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.catalogs import write_upstream_catalog
from tests.factories import bearer_header, make_user
from tests.live_server import serving
from tests.test_tools_approval import ASK, EXTRA, decide, events, tool_messages
from tests.upstream import FakeUpstream

Serve = Callable[[], str]


@pytest.fixture
def serve(database_url: str, upstream: FakeUpstream, tmp_path: Path) -> Iterator[Serve]:
    """`serve()` starts one more `webapp serve` on the test's database; returns its URL."""
    catalog = write_upstream_catalog(tmp_path / "catalog.toml", upstream, EXTRA)
    env = {
        **os.environ,
        "WEBAPP_DATABASE_URL": database_url,
        "WEBAPP_CONFIG": str(catalog),
        "WEBAPP_SECRET_KEY": "tool-approval-workers-secret-0123456789",
        "WEBAPP_STREAM_FLUSH_INTERVAL": "0.1",
        "WEBAPP_TOOL_APPROVAL_SECONDS": "20",
    }
    with ExitStack() as servers:
        yield lambda: servers.enter_context(serving(env, tmp_path))


def test_a_decision_taken_by_another_worker(
    serve: Serve, database_url: str, upstream: FakeUpstream
) -> None:
    token = asyncio.run(make_user(database_url, "alice"))
    writer_url, other_url = serve(), serve()
    headers = bearer_header(token)
    with (
        httpx.Client(base_url=writer_url, headers=headers, timeout=30) as writer,
        httpx.Client(base_url=other_url, headers=headers, timeout=30) as other,
    ):
        made = writer.post("/api/conversations", json={"configuration": "guarded"})
        conversation_id = made.json()["id"]
        path = f"/api/conversations/{conversation_id}/messages"
        stream_headers = {"Accept": "text/event-stream"}
        with writer.stream("POST", path, json={"content": ASK}, headers=stream_headers) as sent:
            stream = events(sent)
            call = next(data for name, data in stream if name == "approval")
            decided = other.post(decide(conversation_id, call["id"]), json={"approve": True})
            if database_url.startswith("postgresql"):
                assert decided.status_code == 200, decided.text
                assert decided.json() == {"id": call["id"], "approve": True, "forwarded": True}
            else:
                assert decided.status_code == 409, decided.text
                assert "another process" in decided.json()["detail"]
                mine = writer.post(decide(conversation_id, call["id"]), json={"approve": True})
                assert mine.status_code == 200, mine.text
            after = list(stream)
    assert [d["state"] for n, d in after if n == "approval"] == ["allowed"]
    assert after[-1][0] == "done" and after[-1][1]["status"] == "complete"
    assert tool_messages(upstream)[0]["content"] == "echo", "the writer ran the call"
