"""The waiting registry (webapp/chat/answering/approvals.py) and the tool loop's `approve`:
a call to a server with `approval = "always"` runs only when allowed (the HTTP MCP
fixture, a real server), a denial or an expired wait reaches the model as a stub, and a
loop without anyone to ask declines; the registry never blocks the loop, tells a second
decision from an unknown call, and keeps nothing once an answer ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.catalogs import upstream_catalog
from tests.mcp_servers import http_fixture
from tests.upstream import FakeUpstream
from webapp.chat.answering.approvals import AlreadyDecided, Approvals, Decision, UnknownCall
from webapp.chat.answering.tool_loop import Approve, ToolCall, ToolEvent, ToolResult, run_tools
from webapp.llm.calibration import Calibrator
from webapp.llm.catalog import McpServerSpec
from webapp.llm.manager import LLMManager
from webapp.llm.routing import resolve
from webapp.llm.window import Transcript
from webapp.tools.connections import McpConnections
from webapp.tools.toolset import gather

# ---- the registry ----------------------------------------------------------------------------


async def asked(approvals: Approvals, call: str, timeout: float = 5) -> asyncio.Task[Decision]:
    """A call of answer 1 waiting (`ask` registers it before its first await: one turn of
    the loop starts it)."""
    task = asyncio.create_task(approvals.ask(1, call, timeout))
    await asyncio.sleep(0)
    assert approvals.waiting(1)
    return task


async def test_a_decision_settles_the_wait_and_a_second_conflicts() -> None:
    approvals = Approvals()
    allowed, denied = await asked(approvals, "a"), await asked(approvals, "b")
    approvals.decide(1, "a", True)
    approvals.decide(1, "b", False)
    assert (await allowed, await denied) == ("allowed", "denied")
    with pytest.raises(AlreadyDecided):
        approvals.decide(1, "a", False)
    with pytest.raises(UnknownCall):
        approvals.decide(1, "c", True)
    with pytest.raises(UnknownCall):
        approvals.decide(2, "a", True)
    approvals.forget(1)
    assert len(approvals) == 0 and not approvals.knows(1)
    with pytest.raises(UnknownCall):
        approvals.decide(1, "a", True)


async def test_no_decision_in_time_expires_and_a_late_one_conflicts() -> None:
    approvals = Approvals()
    task = await asked(approvals, "a", timeout=0.05)
    assert await task == "expired"
    with pytest.raises(AlreadyDecided):
        approvals.decide(1, "a", True)


async def test_a_stopped_answer_ends_its_wait() -> None:
    approvals = Approvals()
    task = await asked(approvals, "a")
    task.cancel()  # Stop: the answer's task is cancelled
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(AlreadyDecided):
        approvals.decide(1, "a", True)
    waiting = await asked(approvals, "b")
    approvals.forget(1)  # the answer ended while a call waited
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_forwarded_decision_applies_only_to_a_call_that_waits() -> None:
    approvals = Approvals()
    task = await asked(approvals, "a")
    approvals.heard(1, "nope", True)
    approvals.heard(7, "a", False)
    assert not task.done()
    approvals.heard(1, "a", True)
    approvals.heard(1, "a", False)  # the first decision stands
    assert await task == "allowed"


# ---- the loop ----------------------------------------------------------------------------------


async def loop(
    tmp_path: Path,
    upstream: FakeUpstream,
    server: McpServerSpec,
    connections: McpConnections,
    approve: Approve | None,
) -> list[ToolEvent]:
    catalog = upstream_catalog(tmp_path, upstream)
    manager = LLMManager(catalog, Calibrator())
    try:
        toolset = await gather(connections, (server.name,), {server.name: server})
        messages = [{"role": "user", "content": "Say it back. Use tool please."}]
        plan = manager.plan(
            resolve(catalog, "large"), Transcript(messages), caller="alice", tools=toolset.tools
        )
        events = run_tools(manager, plan, toolset, connections, 4, approve)
        return [event async for event in events]
    finally:
        await manager.aclose()


def result_of(events: list[ToolEvent]) -> ToolResult:
    return next(event for event in events if isinstance(event, ToolResult))


@pytest.mark.parametrize(
    ("decision", "status", "said"),
    [
        ("allowed", "ok", "echo"),
        ("denied", "denied", "the user declined to run it"),
        ("expired", "denied", "the user did not allow it in time"),
    ],
)
async def test_the_loop_runs_a_guarded_call_only_when_allowed(
    tmp_path: Path,
    upstream: FakeUpstream,
    http_url: str,
    connections: McpConnections,
    decision: Decision,
    status: str,
    said: str,
) -> None:
    server = http_fixture(http_url, tools=("echo",), approval="always")
    asked: list[tuple[str, str]] = []

    async def approve(call: ToolCall, spec: McpServerSpec) -> Decision:
        asked.append((call.name, spec.name))
        return decision

    result = result_of(await loop(tmp_path, upstream, server, connections, approve))
    assert asked == [("echo", "remote")]
    assert result.outcome.status == status and said in result.outcome.content
    sent = upstream.requests[-1]["body"]["messages"][-1]
    assert sent["role"] == "tool" and sent["content"] == result.outcome.content


async def test_nobody_to_ask_declines_and_an_open_server_is_not_asked(
    tmp_path: Path, upstream: FakeUpstream, http_url: str, connections: McpConnections
) -> None:
    guarded = http_fixture(http_url, tools=("echo",), approval="always")
    result = result_of(await loop(tmp_path, upstream, guarded, connections, None))
    assert result.outcome.status == "denied"

    async def never(call: ToolCall, spec: McpServerSpec) -> Decision:
        raise AssertionError("a server without approval is not asked about")

    open_server = http_fixture(http_url, tools=("echo",))
    result = result_of(await loop(tmp_path, upstream, open_server, connections, never))
    assert (result.outcome.status, result.outcome.content) == ("ok", "echo")
