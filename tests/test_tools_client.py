"""The MCP client against real servers: the registry's `mcp-server-time` on stdio and the
fixture (tests/mcp_fixture.py) on stdio and HTTP. Every fault is an outcome the chat can
give the model, and a session that failed is started afresh on the next call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.mcp_servers import http_fixture, stdio_fixture, time_server
from webapp.tools.connections import McpConnections, connecting
from webapp.tools.outcomes import capped
from webapp.tools.toolset import gather

module_loop = pytest.mark.asyncio(loop_scope="module")
pytestmark = module_loop


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def connections() -> AsyncIterator[McpConnections]:
    async with connecting({"FIXTURE_TOKEN": "t0ken", "WEBAPP_SECRET_KEY": "s3cret"}) as held:
        yield held


async def test_the_time_servers_tools_are_listed_and_answer(connections: McpConnections) -> None:
    time = time_server()
    toolset = await gather(connections, ("time",), {"time": time})
    names = [tool["function"]["name"] for tool in toolset.tools]
    assert names == ["get_current_time", "convert_time"] and not toolset.faults
    schema = toolset.tools[0]["function"]["parameters"]
    assert schema["required"] == ["timezone"]
    outcome = await connections.call(time, "get_current_time", '{"timezone": "Europe/Lisbon"}')
    assert outcome.status == "ok"
    assert json.loads(outcome.content)["timezone"] == "Europe/Lisbon"
    refused = await connections.call(time, "get_current_time", '{"timezone": "Nowhere/X"}')
    assert refused.status == "error" and "Nowhere/X" in refused.content


async def test_only_the_entrys_tools_are_offered(connections: McpConnections) -> None:
    time = time_server(tools=("convert_time", "get_weather"))
    toolset = await gather(connections, ("time", "gone"), {"time": time})
    assert [tool["function"]["name"] for tool in toolset.tools] == ["convert_time"]
    assert toolset.faults == {
        "time": "lists no tool 'get_weather'",
        "gone": "no longer in the catalog",
    }


async def test_http_server_calls_and_faults(connections: McpConnections, http_url: str) -> None:
    remote = http_fixture(http_url, timeout=2.0, max_result_tokens=300)
    assert (await connections.call(remote, "echo", '{"text": "<b>hi</b>"}')).content == "<b>hi</b>"
    failed = await connections.call(remote, "fail", "{}")
    assert failed.status == "error"
    hung = await connections.call(remote, "hang", "{}")
    assert (hung.status, hung.content) == (
        "timeout",
        "[tool hang took too long and was stopped: no answer within 2 s. "
        "Tell the user if it matters.]",
    )
    flood = await connections.call(remote, "flood", '{"words": 5000}')
    assert flood.status == "ok" and flood.cut_tokens > 0
    assert flood.content.endswith(
        f"[result cut: {flood.cut_tokens} more tokens over this tool's cap of 300]"
    )
    assert (await connections.call(remote, "echo", '{"text": "after"}')).content == "after"


async def test_bad_arguments_are_stubs_without_a_call(connections: McpConnections) -> None:
    time = time_server()
    for arguments, reason in [("{", "not valid JSON"), ("[1]", "not a JSON object")]:
        outcome = await connections.call(time, "get_current_time", arguments)
        assert outcome.status == "failed" and reason in outcome.content
    unknown = await connections.call(time, "no_such_tool", "{}")
    assert unknown.status == "failed" and "no_such_tool" in unknown.content


async def test_a_crash_mid_call_is_a_stub_and_the_next_call_restarts(
    connections: McpConnections,
) -> None:
    local = stdio_fixture()
    crashed = await connections.call(local, "crash", "{}")
    assert crashed.status == "failed" and "could not be run" in crashed.content
    assert (await connections.call(local, "echo", '{"text": "back"}')).content == "back"


async def test_a_stdio_server_gets_only_its_entrys_variables(
    connections: McpConnections,
) -> None:
    local = stdio_fixture(name="local-env", env_from={"TOKEN": "FIXTURE_TOKEN"})
    names = (await connections.call(local, "environment", "{}")).content.split()
    assert "TOKEN" in names
    assert not [name for name in names if name.startswith("WEBAPP_") or name == "FIXTURE_TOKEN"]


async def test_servers_that_cannot_start_are_faults(connections: McpConnections) -> None:
    missing = time_server(name="missing", command="/nonexistent/mcp-server")
    unset = stdio_fixture(name="unset", env_from={"TOKEN": "NOT_SET_ANYWHERE"})
    refused = http_fixture("http://127.0.0.1:9/mcp", name="refused")
    catalog = {spec.name: spec for spec in (missing, unset, refused)}
    toolset = await gather(connections, tuple(catalog), catalog)
    assert not toolset.tools and set(toolset.faults) == set(catalog)
    assert "NOT_SET_ANYWHERE" in toolset.faults["unset"]
    outcome = await connections.call(missing, "anything", "{}")
    assert outcome.status == "failed" and "server 'missing' is unavailable" in outcome.content


async def test_the_cap_keeps_short_output_and_cuts_long_output() -> None:
    assert capped("short", 50) == ("short", 0)
    text, cut = capped("x" * 100_000, 100)
    assert cut > 0 and text.startswith("xxx") and "cap of 100" in text
