"""A turn's tool calls stored on the turn, on both databases, through the JSON API: real MCP
servers (the registry's `mcp-server-time` on stdio, the fixture on HTTP) answer the calls
of the fake upstream (OpenAI wire format) and of the fake vendors (Anthropic's and
Gemini's); the rows are in the API's messages, the next send replays them in each wire
format, export and import carry them, and a regenerate runs its tools again."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.factories import new_conversation
from tests.factories.settings import settings_for
from tests.looplag import TICK, watching_app
from tests.mcp_servers import FIXTURE, TIME_SERVER, stdio_fixture_toml
from tests.upstream import FakeUpstream
from tests.vendors import FakeVendors, providers_toml
from webapp.app import create_app
from webapp.settings import Settings


def catalog(vendors: FakeVendors, http_url: str, *, without_remote: bool = False) -> str:
    """The module's catalog; `without_remote`: as the admin leaves it after dropping the
    HTTP server (its configurations keep their names, without tools)."""
    text = _catalog(vendors, http_url)
    if without_remote:
        start = text.index('[[mcp_servers]]\nname = "remote"')
        end = text.index("[[", start + 2)
        text = (text[:start] + text[end:]).replace('tools = ["remote"]\n', "")
    return text


LOCAL_SERVER = stdio_fixture_toml(
    "local", 'tools = ["environment"]', 'env_from = { TOKEN = "FIXTURE_TOKEN" }', "timeout = 20"
)
"""The fixture on stdio, handed the environment variable FIXTURE_TOKEN as TOKEN."""


def _catalog(vendors: FakeVendors, http_url: str) -> str:
    native = "".join(
        f"""
[[models]]
name = "{name}"
provider = "{provider}"
model_id = "{name}-small"
context_window = 4096
max_output_tokens = 200

[[configurations]]
name = "{name}-tools"
model = "{name}"
tools = ["remote"]
"""
        for name, provider in (("claude", "claude"), ("gemini", "google"))
    )
    return (
        providers_toml(vendors)
        + native
        + f"""
[[mcp_servers]]
name = "time"
transport = "stdio"
command = "{TIME_SERVER}"
tools = ["get_current_time"]
timeout = 20

[[mcp_servers]]
name = "remote"
transport = "http"
url = "{http_url}"
tools = ["echo"]

[[mcp_servers]]
name = "reporter"
transport = "http"
url = "{http_url}"
tools = ["report"]

{LOCAL_SERVER}
[[configurations]]
name = "envs"
model = "large"
tools = ["local"]

[[configurations]]
name = "timed"
model = "large"
tools = ["time"]

[[configurations]]
name = "remote-tools"
model = "large"
tools = ["remote"]

[[configurations]]
name = "reports"
model = "medium"
tools = ["reporter"]
keep_tool_results = 1
"""
    )


FAULTS = {
    "hang": ('transport = "http"\nurl = "{url}"\ntimeout = 1', "timeout", "took too long"),
    "crash": (
        'transport = "stdio"\ncommand = "{python}"\nargs = ["{fixture}", "stdio"]\ntimeout = 20',
        "failed",
        "could not be run",
    ),
    "huge": ('transport = "http"\nurl = "{url}"\nmax_result_tokens = 300', "ok", "[result cut:"),
    "fail": ('transport = "http"\nurl = "{url}"', "error", "Error executing tool fail"),
    "markup": ('transport = "http"\nurl = "{url}"', "ok", "<script>"),
    "garbled": ('transport = "http"\nurl = "{url}"', "ok", "before\ufffdafter\n[image]"),
}
"""A fixture tool each: its server's entry, the stored result's status and a piece of its
text the model is given."""


def faults_toml(http_url: str) -> str:
    parts = []
    for tool, (entry, _, _) in FAULTS.items():
        fields = entry.format(url=http_url, python=sys.executable, fixture=FIXTURE)
        parts.append(f'[[mcp_servers]]\nname = "f-{tool}"\n{fields}\ntools = ["{tool}"]\n')
        parts.append(f'[[configurations]]\nname = "c-{tool}"\nmodel = "large"\n')
        parts.append(f'tools = ["f-{tool}"]\n')
    return "\n".join(parts)


@pytest.fixture
def app_with(
    client: AsyncTestClient,
    database_url: str,
    tmp_path: Path,
    upstream: FakeUpstream,
    vendors: FakeVendors,
    http_url: str,
) -> Callable[..., AbstractAsyncContextManager[AsyncTestClient]]:
    """Another app on the same database (as after a restart), its catalog the module's
    plus `extra` (or without the HTTP server), with alice's token."""

    @asynccontextmanager
    async def started(extra: str = "", *, without_remote: bool = False) -> AsyncIterator[Any]:
        text = catalog(vendors, http_url, without_remote=without_remote) + extra
        folder = tmp_path / "restarted"
        folder.mkdir(exist_ok=True)
        settings = settings_for(database_url, folder, upstream, text)
        async with AsyncTestClient(app=create_app(settings)) as other:
            other.headers["Authorization"] = client.headers["Authorization"]
            yield other

    return started


@pytest.fixture
def settings(
    database_url: str,
    tmp_path: Path,
    upstream: FakeUpstream,
    vendors: FakeVendors,
    vendor_keys: None,
    http_url: str,
) -> Settings:
    text = catalog(vendors, http_url) + faults_toml(http_url)
    return settings_for(database_url, tmp_path, upstream, text)


async def messages_of(client: AsyncTestClient, conversation_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


async def send(client: AsyncTestClient, conversation_id: str, text: str) -> dict[str, Any]:
    response = await client.post(
        f"/api/conversations/{conversation_id}/messages", json={"content": text}
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


def step_rows(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "tool" or m["tool_calls"]]


async def test_calls_and_results_are_rows_of_the_turn_and_sent_again(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    conversation = await new_conversation(client, configuration="timed")
    cid = conversation["id"]
    sent = await send(client, cid, "What time is it? Use tool please.")
    assert sent["assistant"]["status"] == "complete"
    messages = await messages_of(client, cid)
    # The answer's row was written with the question; its steps follow it, in order.
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant", "tool"]
    user, answer, step, result = messages
    assert answer["id"] == sent["assistant"]["id"] and answer["tool_calls"] is None
    (call,) = step["tool_calls"]
    assert set(call) == {"id", "name", "arguments"} and call["name"] == "get_current_time"
    assert json.loads(call["arguments"]) == {"timezone": "echo"}
    assert (result["tool_call_id"], result["name"]) == (call["id"], "get_current_time")
    assert result["status"] == "error" and "echo" in result["content"]
    assert step["model"] == "large" and result["seq"] == step["seq"] + 1
    assert user["fit"]["cleared"] == []

    upstream.forget_requests()
    await send(client, cid, "And what did the tool say?")
    (chat,) = upstream.chats
    wire = chat["messages"]
    # The model sees its earlier call and the result, before the answer they led to.
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "assistant", "user"]
    assert wire[1]["tool_calls"][0]["id"] == call["id"] == wire[2]["tool_call_id"]
    assert wire[2]["content"] == result["content"]
    assert wire[3]["content"] == answer["content"]
    messages = await messages_of(client, cid)
    assert [m["role"] for m in messages[4:]] == ["user", "assistant"]
    assert messages[4]["seq"] == 5  # after the steps: no seq is reused


@pytest.mark.parametrize("configuration", ["claude-tools", "gemini-tools"])
async def test_native_formats_store_the_calls_and_replay_them(
    client: AsyncTestClient, vendors: FakeVendors, configuration: str
) -> None:
    conversation = await new_conversation(client, configuration=configuration)
    cid = conversation["id"]
    await send(client, cid, "Please use tool to answer.")
    steps = step_rows(await messages_of(client, cid))
    assert [m["role"] for m in steps] == ["assistant", "tool"]
    assert steps[1]["status"] == "ok" and steps[1]["name"] == "echo"
    assert steps[1]["tool_call_id"] == steps[0]["tool_calls"][0]["id"]
    before = len(vendors.requests)
    await send(client, cid, "Thanks, and now?")
    body = [
        r["body"]
        for r in vendors.requests[before:]
        if r["path"].endswith("/v1/messages") or "generateContent" in r["path"]
    ][-1]
    text = json.dumps(body)
    if configuration == "claude-tools":
        kinds = [
            block.get("type")
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
        ]
        assert "tool_use" in kinds and "tool_result" in kinds
        assert steps[1]["tool_call_id"] in text
    else:
        parts = [part for content in body["contents"] for part in content["parts"]]
        assert any("functionCall" in part for part in parts)
        assert any("functionResponse" in part for part in parts)
    assert steps[1]["content"] in text


async def test_export_and_import_carry_the_steps(client: AsyncTestClient) -> None:
    conversation = await new_conversation(client, configuration="remote-tools")
    cid = conversation["id"]
    await send(client, cid, "Please use tool to answer.")
    await send(client, cid, "Fine.")
    exported = (await client.get(f"/api/conversations/{cid}/export")).json()
    roles = [m["role"] for m in exported["messages"]]
    assert roles == ["user", "assistant", "assistant", "tool", "user", "assistant"]
    imported = await client.post("/api/conversations/import", json=exported)
    assert imported.status_code == 201, imported.text
    again = (await client.get(f"/api/conversations/{imported.json()['id']}/export")).json()

    def kept(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in m.items() if k not in ("id", "created_at")} for m in messages]

    assert kept(again["messages"]) == kept(exported["messages"])
    markdown = (await client.get(f"/api/conversations/{cid}/export?format=markdown")).text
    assert "echo" in markdown

    # A forged step is refused with the field named, never stored.
    forged = json.loads(json.dumps(exported))
    forged["messages"][3]["status"] = "complete"
    refused = await client.post("/api/conversations/import", json=forged)
    assert refused.status_code == 400 and "messages[3].status" in refused.text
    forged = json.loads(json.dumps(exported))
    forged["messages"][2]["tool_calls"] = [{"id": "x"}]
    refused = await client.post("/api/conversations/import", json=forged)
    assert refused.status_code == 400 and "tool_calls" in refused.text


async def test_a_regenerate_runs_its_tools_again(client: AsyncTestClient) -> None:
    conversation = await new_conversation(client, configuration="remote-tools")
    cid = conversation["id"]
    first = await send(client, cid, "Please use tool to answer.")
    response = await client.post(
        f"/api/conversations/{cid}/messages/{first['user']['id']}/regenerate"
    )
    assert response.status_code == 201, response.text
    messages = await messages_of(client, cid)
    # The active branch is the regenerated turn: its own call and result.
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant", "tool"]
    assert messages[0]["id"] != first["user"]["id"] and messages[3]["status"] == "ok"
    assert messages[3]["seq"] > 4


def chats_of(upstream: FakeUpstream) -> list[list[dict[str, Any]]]:
    return [chat["messages"] for chat in upstream.chats]


async def test_older_results_are_cleared_in_the_request_only_when_the_cut_moves(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    conversation = await new_conversation(client, configuration="reports")
    cid = conversation["id"]
    upstream.forget_requests()
    for number in range(6):
        await send(client, cid, f"Turn {number}: please use tool.")
    messages = await messages_of(client, cid)
    results = [m for m in messages if m["role"] == "tool"]
    assert len(results) == 6 and all(len(m["content"]) > 5000 for m in results)  # stored whole
    fits = [m["fit"] for m in messages if m["role"] == "user"]
    cleared = [fit["cleared"] for fit in fits]
    assert any(cleared), "a 4k window fills with these results"
    first = next(i for i, spans in enumerate(cleared) if spans)
    assert fits[first]["cut_moved"]
    for span in cleared[first]:
        assert set(span) == {"first_seq", "last_seq", "tokens"} and span["tokens"] > 1000
        for seq in range(span["first_seq"], span["last_seq"] + 1):
            assert next(m for m in messages if m["seq"] == seq)["role"] == "tool"
    # The requests carried stubs in their place, naming the tool and the tokens.
    chats = chats_of(upstream)
    stubs = [m for chat in chats for m in chat if str(m.get("content")).startswith("[result of")]
    assert stubs and all("report" in m["content"] and "tokens" in m["content"] for m in stubs)
    # Two requests a send (the call, then the answer). Between moves, each request is
    # the previous one plus what was appended: only a send that moved the cut differs.
    assert len(chats) == 2 * len(fits)
    for index in range(1, len(chats)):
        before, after = chats[index - 1], chats[index]
        if after[: len(before)] != before:
            assert fits[index // 2]["cut_moved"], index
    assert sum(fit["cut_moved"] for fit in fits) < len(fits) - 1
    # The turn's note says it, as the words the fit's spans make.
    page = (await client.get(f"/c/{cid}")).text
    count = sum(s["last_seq"] - s["first_seq"] + 1 for s in cleared[first])
    tokens = sum(s["tokens"] for s in cleared[first])
    noun = "result" if count == 1 else "results"
    assert f"{count} older tool {noun} cleared, {tokens:,} tokens" in page
    assert "data-cleared-tool-results" in page


async def test_a_server_removed_from_the_catalog_leaves_the_conversation_going(
    client: AsyncTestClient, upstream: FakeUpstream, app_with: Any
) -> None:
    conversation = await new_conversation(client, configuration="remote-tools")
    cid = conversation["id"]
    await send(client, cid, "Please use tool to answer.")
    # The admin drops the server; the configuration offers no tools any more.
    async with app_with(without_remote=True) as other:
        upstream.forget_requests()
        sent = await send(other, cid, "Go on without it.")
        assert sent["assistant"]["status"] == "complete"
        (chat,) = upstream.chats
        assert "tools" not in chat
        # The model still sees the call it made and the result it had.
        assert [m["role"] for m in chat["messages"]] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
        ]
        messages = await messages_of(other, cid)
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]


async def test_a_tool_runs_with_its_servers_own_environment_only(
    client: AsyncTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's secrets (here its secret key and the vendors' API keys, which the
    `vendor_keys` fixture put in this process's environment) never reach a tool."""
    monkeypatch.setenv("FIXTURE_TOKEN", "for-the-tool")
    monkeypatch.setenv("WEBAPP_SECRET_KEY", "not-for-tools")
    conversation = await new_conversation(client, configuration="envs")
    await send(client, conversation["id"], "Please use tool to answer.")
    (result,) = [m for m in await messages_of(client, conversation["id"]) if m["role"] == "tool"]
    assert result["status"] == "ok" and result["name"] == "environment"
    names = result["content"].split()
    assert "TOKEN" in names
    assert not [n for n in names if n.startswith(("WEBAPP_", "FAKE_", "FIXTURE_"))], names


@pytest.mark.parametrize("tool", list(FAULTS))
async def test_a_faulty_tool_is_a_stored_result_and_the_conversation_goes_on(
    client: AsyncTestClient, upstream: FakeUpstream, tool: str
) -> None:
    """A hang (past the timeout), a crash mid-call, a flood (past the cap), a failure and
    markup: each is a result row the model was told about; the answer and the next
    send go on, and the event loop never waits on the tool past its timeout."""
    _, status, said = FAULTS[tool]
    conversation = await new_conversation(client, configuration=f"c-{tool}")
    cid = conversation["id"]
    first = await send(client, cid, "Please use tool to answer.")
    assert first["assistant"]["status"] == "complete"
    (result,) = [m for m in await messages_of(client, cid) if m["role"] == "tool"]
    assert result["status"] == status and said in result["content"], result
    assert result["name"] == tool
    sent_back = [m for chat in chats_of(upstream) for m in chat if m["role"] == "tool"]
    assert sent_back[-1]["content"] == result["content"]
    if tool == "huge":
        assert len(result["content"]) < 3000  # capped before it was stored or sent
    second = await send(client, cid, "Go on.")
    assert second["assistant"]["status"] == "complete"
    roles = [m["role"] for m in await messages_of(client, cid)]
    assert roles == ["user", "assistant", "assistant", "tool", "user", "assistant"]


async def test_the_event_loop_never_waits_on_a_hung_tool(client: AsyncTestClient) -> None:
    """While a tool hangs (until its 1 s timeout), the app's loop keeps running: its ticker
    ticks all along, and no tick is held."""
    conversation = await new_conversation(client, configuration="c-hang")
    with watching_app(client) as lag:
        started = time.perf_counter()
        sent = await send(client, conversation["id"], "Please use tool.")
        took = time.perf_counter() - started
    assert sent["assistant"]["status"] == "complete"
    assert took >= 1.0, "the call hung until its timeout"
    assert lag.ticks >= took / TICK / 4, (lag.ticks, took)
    assert lag.busiest < 0.1, f"the loop was held {lag.busiest:.2f} s of CPU"


async def test_the_page_of_a_turn_with_tools_shows_tool_output_escaped(
    client: AsyncTestClient,
) -> None:
    """Tool output is untrusted: the page never renders it as HTML (the cleared-results
    note and the calls' display are drawn by the page's own work)."""
    conversation = await new_conversation(client, configuration="c-markup")
    await send(client, conversation["id"], "Please use tool to answer.")
    page = await client.get(f"/c/{conversation['id']}")
    assert page.status_code == 200, page.text
    assert '<script>alert("tool")</script>' not in page.text
    assert '<a href="javascript:' not in page.text
    assert "&lt;script&gt;" in page.text  # shown, as text


async def test_a_fork_of_a_turn_with_tools_keeps_its_steps(client: AsyncTestClient) -> None:
    conversation = await new_conversation(client, configuration="remote-tools")
    cid = conversation["id"]
    first = await send(client, cid, "Please use tool to answer.")
    await send(client, cid, "And then?")
    response = await client.post(
        f"/api/conversations/{cid}/fork", json={"message_id": first["user"]["id"]}
    )
    assert response.status_code == 201, response.text
    copied = await messages_of(client, response.json()["id"])
    assert [m["role"] for m in copied] == ["user", "assistant", "assistant", "tool"]
    assert copied[3]["tool_call_id"] == copied[2]["tool_calls"][0]["id"]


async def test_rows_without_calls_store_sql_null(
    client: AsyncTestClient, settings: Settings
) -> None:
    """Admission finds the newest answer past a turn's steps by `tool_calls IS NULL`: a
    row without calls must hold SQL NULL there, not JSON `null`, whatever wrote it."""
    plain = await new_conversation(client, configuration="large")
    await send(client, plain["id"], "Hello.")
    tools = await new_conversation(client, configuration="remote-tools")
    await send(client, tools["id"], "Please use tool to answer.")
    exported = (await client.get(f"/api/conversations/{tools['id']}/export")).json()
    assert (await client.post("/api/conversations/import", json=exported)).status_code == 201
    engine = create_async_engine(settings.database_url)
    try:
        async with engine.connect() as connection:
            rows = (
                await connection.execute(
                    text("SELECT role, tool_calls IS NULL, fit_cleared IS NULL FROM message")
                )
            ).all()
    finally:
        await engine.dispose()
    assert len(rows) == 2 + 4 + 4
    for role, no_calls, no_cleared in rows:
        assert no_cleared
        assert no_calls or role == "assistant"
    assert sum(not no_calls for _, no_calls, _ in rows) == 2  # one step, twice


async def test_a_call_without_its_result_is_never_sent(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    """A turn cut off between a call and its result (here: an import without the result)
    replays the pairs it has: a call alone would be refused by every wire format."""
    conversation = await new_conversation(client, configuration="remote-tools")
    await send(client, conversation["id"], "Please use tool to answer.")
    await send(client, conversation["id"], "Thanks.")
    exported = (await client.get(f"/api/conversations/{conversation['id']}/export")).json()
    messages = exported["messages"]
    assert [m["role"] for m in messages][2:4] == ["assistant", "tool"]
    del messages[3]
    for seq, message in enumerate(messages, start=1):
        message["seq"], message["parent_seq"] = seq, seq - 1 or None
    imported = await client.post("/api/conversations/import", json=exported)
    assert imported.status_code == 201, imported.text
    upstream.forget_requests()
    await send(client, imported.json()["id"], "Again?")
    (chat,) = chats_of(upstream)
    assert [m["role"] for m in chat] == ["user", "assistant", "user", "assistant", "user"]
    assert not any(m.get("tool_calls") for m in chat)


async def test_anthropic_is_told_earlier_calls_as_text_once_no_tools_are_offered(
    client: AsyncTestClient, vendors: FakeVendors, app_with: Any
) -> None:
    """The Messages API refuses `tool_use` and `tool_result` blocks in a request that
    declares no tools (the fake does too): with the server gone, the earlier call and its
    result reach the model as text, and the conversation goes on."""
    conversation = await new_conversation(client, configuration="claude-tools")
    cid = conversation["id"]
    await send(client, cid, "Please use tool to answer.")
    async with app_with(without_remote=True) as other:
        before = len(vendors.requests)
        sent = await send(other, cid, "Go on without it.")
        assert sent["assistant"]["status"] == "complete", sent
    body = [r["body"] for r in vendors.requests[before:] if r["path"].endswith("/v1/messages")][-1]
    assert "tools" not in body
    text = json.dumps(body)
    assert "tool_use" not in text and "[called echo with" in text and "[result of echo]" in text
