"""The tool loop (webapp/chat/answering/tool_loop.py) through real HTTP: the fake upstream
in the OpenAI wire format and the fake vendors in Anthropic's and Gemini's (shapes proven
by the official SDKs) ask for tools, which run on real MCP servers (the registry's
`mcp-server-time` on stdio, the fixture on HTTP); results go back and the model answers.
Each step is bounded again, and a call that cannot run gives the model a stub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.catalogs import upstream_catalog
from tests.mcp_servers import http_fixture, time_server
from tests.upstream import FakeUpstream
from tests.vendors import FakeVendors, providers_toml
from webapp.chat.answering.tool_loop import (
    Answered,
    Stepped,
    ToolCall,
    ToolEvent,
    ToolResult,
    run_tools,
)
from webapp.llm.calibration import Calibrator
from webapp.llm.catalog import Catalog, McpServerSpec, load_catalog
from webapp.llm.manager import LLMManager
from webapp.llm.routing import resolve
from webapp.llm.window import Transcript
from webapp.tools.connections import McpConnections
from webapp.tools.toolset import gather

NATIVE = "".join(
    f"""
[[models]]
name = "{name}"
provider = "{provider}"
model_id = "{name}-small"
context_window = 4096
max_output_tokens = 200

[[configurations]]
name = "{name}"
model = "{name}"
"""
    for name, provider in (("claude", "claude"), ("gemini", "google"))
)


async def loop(
    catalog: Catalog,
    configuration: str,
    servers: list[McpServerSpec],
    connections: McpConnections,
    text: str = "Please use tool to answer.",
    max_steps: int = 8,
) -> list[ToolEvent]:
    manager = LLMManager(catalog, Calibrator())
    try:
        named = {spec.name: spec for spec in servers}
        toolset = await gather(connections, tuple(named), named)
        route = resolve(catalog, configuration)
        messages = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": text}]
        plan = manager.plan(route, Transcript(messages), caller="alice", tools=toolset.tools)
        return [event async for event in run_tools(manager, plan, toolset, connections, max_steps)]
    finally:
        await manager.aclose()


def shape(events: list[ToolEvent]) -> list[str]:
    return [type(event).__name__ for event in events]


async def test_openai_format_with_the_time_server(
    tmp_path: Path, upstream: FakeUpstream, connections: McpConnections
) -> None:
    catalog = upstream_catalog(tmp_path, upstream)
    events = await loop(catalog, "large", [time_server()], connections)
    assert shape(events) == ["Stepped", "Calling", "ToolCall", "ToolResult", "Stepped", "Answered"]
    call, result, answered = events[2], events[3], events[-1]
    assert isinstance(call, ToolCall) and isinstance(result, ToolResult)
    assert (call.name, json.loads(call.arguments)) == ("get_current_time", {"timezone": "echo"})
    # The fake fills arguments by type: "echo" is no timezone, and the server says so.
    assert result.outcome.status == "error" and "echo" in result.outcome.content
    assert isinstance(answered, Answered) and answered.steps == 2
    assert [m["role"] for m in answered.appended] == ["assistant", "tool"]
    assert answered.appended[1]["tool_call_id"] == call.id
    assert "I saw 4 messages" in answered.result.content
    last = upstream.requests[-1]["body"]
    assert [m["role"] for m in last["messages"]] == ["system", "user", "assistant", "tool"]
    assert last["messages"][-1]["content"] == result.outcome.content
    first, second = events[0], events[4]
    assert isinstance(first, Stepped) and isinstance(second, Stepped)
    assert second.fit.estimated_tokens > first.fit.estimated_tokens


@pytest.mark.parametrize("configuration", ["claude", "gemini"])
async def test_native_formats_with_the_http_server(
    tmp_path: Path,
    vendors: FakeVendors,
    vendor_keys: None,
    http_url: str,
    connections: McpConnections,
    configuration: str,
) -> None:
    path = tmp_path / "native.toml"
    path.write_text(providers_toml(vendors) + NATIVE, encoding="utf-8")
    remote = http_fixture(http_url, tools=("echo",))
    events = await loop(load_catalog(path), configuration, [remote], connections)
    assert shape(events) == ["Stepped", "Calling", "ToolCall", "ToolResult", "Stepped", "Answered"]
    result = events[3]
    assert isinstance(result, ToolResult)
    assert (result.call.name, result.outcome.status) == ("echo", "ok")
    answered = events[-1]
    assert isinstance(answered, Answered) and answered.result.content
    assert not answered.result.tool_calls


async def test_a_hung_tool_is_a_stub_and_the_turn_goes_on(
    tmp_path: Path, upstream: FakeUpstream, http_url: str, connections: McpConnections
) -> None:
    catalog = upstream_catalog(tmp_path, upstream)
    remote = http_fixture(http_url, tools=("hang",), timeout=1.0)
    events = await loop(catalog, "large", [remote], connections)
    assert shape(events)[-3:] == ["ToolResult", "Stepped", "Answered"]
    result = events[3]
    assert isinstance(result, ToolResult) and result.outcome.status == "timeout"
    sent = upstream.requests[-1]["body"]["messages"][-1]
    assert sent["role"] == "tool" and "took too long" in sent["content"]


async def test_the_last_step_offers_no_tools(
    tmp_path: Path, upstream: FakeUpstream, http_url: str, connections: McpConnections
) -> None:
    catalog = upstream_catalog(tmp_path, upstream)
    remote = http_fixture(http_url, tools=("echo",))
    events = await loop(catalog, "large", [remote], connections, max_steps=1)
    assert shape(events) == ["Stepped", "Answered"]
    assert "tools" not in upstream.requests[-1]["body"]
