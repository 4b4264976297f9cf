"""Tools in the chat through the JSON API, on both databases: a configuration that offers
`mcp-server-time` (stdio, from the registry) answers through the fake upstream's tool call,
the SSE stream sends `tool_call` and `tool_result` beside `delta`, and a server that
cannot start gives the model a stub while the turn goes on."""

from __future__ import annotations

import json

import pytest
from httpx import Response
from litestar.testing import AsyncTestClient

from tests.factories import new_conversation, parse_sse
from tests.mcp_servers import TIME_SERVER
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.settings(
    extra=f"""
[[mcp_servers]]
name = "time"
transport = "stdio"
command = "{TIME_SERVER}"
tools = ["get_current_time"]

[[mcp_servers]]
name = "gone"
transport = "stdio"
command = "/nonexistent/mcp-server"
timeout = 5

[[configurations]]
name = "timed"
model = "large"
tools = ["time"]

[[configurations]]
name = "broken-tools"
model = "large"
tools = ["gone"]
"""
)


async def send(
    client: AsyncTestClient, configuration: str, content: str, *, streamed: bool = False
) -> Response:
    """`content` sent in a new conversation of `configuration`, as JSON or as SSE."""
    conversation = await new_conversation(client, configuration=configuration)
    return await client.post(
        f"/api/conversations/{conversation['id']}/messages",
        json={"content": content},
        headers={"Accept": "text/event-stream"} if streamed else None,
    )


async def test_a_streamed_turn_calls_the_time_server(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    response = await send(client, "timed", "What time is it? Use tool please.", streamed=True)
    assert response.status_code == 201
    events = parse_sse(response.text)
    names = [name for name, _, _ in events]
    assert names[0] == "fit" and names[-1] == "done"
    assert names.index("tool_call") < names.index("tool_result") < names.index("delta")
    call = next(data for name, data, _ in events if name == "tool_call")
    result = next(data for name, data, _ in events if name == "tool_result")
    assert call["name"] == "get_current_time" and json.loads(call["arguments"])
    assert (result["id"], result["name"]) == (call["id"], "get_current_time")
    # The fake fills arguments by type ("echo"): the server refuses that timezone.
    assert result["status"] == "error" and "echo" in result["content"]
    chats = upstream.chats
    assert [[t["function"]["name"] for t in chat.get("tools", [])] for chat in chats] == [
        ["get_current_time"],
        ["get_current_time"],
    ]
    answer = chats[-1]["messages"]
    assert [m["role"] for m in answer[-3:]] == ["user", "assistant", "tool"]
    done = events[-1][1]
    assert done["status"] == "complete" and "I saw" in done["content"]
    fits = [data for name, data, _ in events if name == "fit"]
    estimated = [data["fit"]["estimated_tokens"] for data in fits]
    assert estimated == sorted(estimated) and estimated[1] > estimated[0]  # schemas, results


async def test_a_server_that_cannot_start_leaves_the_turn_answered(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    response = await send(client, "broken-tools", "Use tool if you have one.")
    assert response.status_code == 201
    assistant = response.json()["assistant"]
    assert assistant["status"] == "complete" and assistant["content"]
    chats = upstream.chats
    assert chats and not any("tools" in chat for chat in chats)  # nothing could be listed


async def test_with_no_tool_to_offer_the_answer_streams_as_without_tools(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    response = await send(client, "broken-tools", "Use tool if you have one.", streamed=True)
    events = parse_sse(response.text)
    deltas = [data["text"] for name, data, _ in events if name == "delta"]
    assert len(deltas) > 3, "the text came in pieces, as the model wrote it"
    done = events[-1][1]
    assert events[-1][0] == "done" and done["status"] == "complete"
    assert "".join(deltas) == done["content"]
    assert [r["body"].get("stream") for r in upstream.requests if r["body"]] == [True]
