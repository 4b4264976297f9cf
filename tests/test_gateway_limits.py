"""No gateway call stalls the server or slips past a limit: bodies are bounded in bytes
and in messages before they are parsed, a caller over its rate limit is refused before
its body is read, and every refusal, crafted input included, is a 4xx in OpenAI's shape.

Driven over real HTTP (uvicorn on a free port, the official openai client and httpx), as
tests/test_gateway.py does. The served app's event loop runs a ticker, so each test
can say how long the loop was held while a big body was handled."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.factories import settings_for
from tests.served import Gateway, gateway_on, webapp_of
from tests.upstream import FakeUpstream

STALL = 0.1
"""The longest the server's loop may be held by one request, in seconds."""
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
NOWHERE = """
[[configurations]]
name = "nowhere"
model = "unreachable"
"""
"""A configuration whose only model is down: a call runs the whole pipeline (parse,
estimate, fit) and fails fast, with no upstream in this process competing for the GIL."""
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


class Ticker:
    """A task on the served app's loop that wakes every 5 ms; `worst` is the longest it
    was kept waiting past that (the loop was busy with something else)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - 0.005)
            last = now

    def measure(
        self, call: Callable[[], Any], runs: int = 3, below: float = STALL
    ) -> tuple[Any, float]:
        """`call()`'s result and the longest stall of the loop while it ran: the least
        of up to `runs` tries, since a stall the request causes comes back every time,
        while one of the machine's (another process on the CPU) does not. The first try
        that stalls less than `below` ends it: the least cannot then reach `below`, so
        more tries could not change whether a test's `stall < STALL` holds.

        The cyclic garbage collector is paused meanwhile: a full collection of this test
        process (pytest, every module it imported, the fake upstream) holds the GIL for
        0.2 to 0.4 s whichever thread starts it, which would be measured as a stall of
        any request. What is measured is the work the request makes the loop do."""
        stalls = []
        for _ in range(runs):
            gc.collect()
            gc.disable()
            try:
                time.sleep(0.05)
                self.worst = 0.0
                result = call()
                time.sleep(0.05)  # the ticker's next wake-up sees a stall that just ended
                stalls.append(self.worst)
            finally:
                gc.enable()
            if stalls[-1] < below:
                break
        return result, min(stalls)


@dataclass
class Served(Gateway):
    ticker: Ticker = None  # type: ignore[assignment]

    def post(self, path: str, content: bytes | Any, **headers: str) -> httpx.Response:
        with self.http() as http:
            return http.post(
                path, content=content, headers={"content-type": "application/json", **headers}
            )


@pytest.fixture
def serve(tmp_path: Path, upstream: FakeUpstream) -> Iterator[Callable[..., Served]]:
    with ExitStack() as running:

        def start(database_url: str, **overrides: Any) -> Served:
            settings = settings_for(database_url, tmp_path, upstream, NOWHERE, **overrides)
            ticker = Ticker()
            gateway = running.enter_context(gateway_on(settings, ("alice", "bob"), [ticker.start]))
            # What exists now (pytest, the modules, the app) is left out of collections
            # until the end, so each measurement's collection beforehand scans only what
            # is new.
            gc.collect()
            gc.freeze()
            # The gateway's list of clients, which it closes when it stops.
            return Served(gateway.url, gateway.tokens, gateway.clients, ticker=ticker)

        yield start
        gc.unfreeze()


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The OpenAI-shaped error of a refusal: a 4xx with exactly the four fields."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] in ("invalid_request_error", "rate_limit_error")
    return dict(body["error"])


def many_messages(count: int) -> bytes:
    messages = [{"role": "user", "content": "x"}] * count
    return json.dumps({"model": "small", "messages": messages}, separators=(",", ":")).encode()


def one_long_message(size: int, model: str = "small") -> bytes:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": ""}]})
    words = "word " * ((size - len(body)) // 5)
    return json.dumps({"model": model, "messages": [{"role": "user", "content": words}]}).encode()


# ---- bytes ----------------------------------------------------------------------------------


def test_a_body_past_the_byte_limit_is_a_413_and_holds_nothing_up(
    serve: Callable[..., Served], sqlite_url: str, upstream: FakeUpstream
) -> None:
    gateway = serve(sqlite_url)
    big = one_long_message(9_500_000)
    for route in ROUTES:
        refused, stall = gateway.ticker.measure(partial(gateway.post, route, big))
        assert refused.status_code == 413
        error = error_of(refused)
        assert error["code"] == "request_too_large" and "4,194,304 bytes" in error["message"]
        assert stall < STALL, f"{route}: the loop was held {stall:.3f} s"

    # Without a Content-Length (chunked), refused as soon as the limit is passed.
    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 2**16):
            yield big[start : start + 2**16]

    chunked = gateway.post("/v1/chat/completions", chunks())
    assert chunked.status_code == 413 and error_of(chunked)["code"] == "request_too_large"
    # The official client raises its usual error.
    with pytest.raises(openai.APIStatusError) as raised:
        gateway.client().chat.completions.create(
            model="small", messages=[{"role": "user", "content": "word " * 1_000_000}]
        )
    assert raised.value.status_code == 413 and raised.value.code == "request_too_large"
    # Nothing of them reached the upstream (a process's first app may still be asking it
    # for its models' windows, a GET, in the background).
    assert [r for r in upstream.requests if r["method"] != "GET"] == []


def test_a_body_within_the_limit_is_answered_without_stalling_the_loop(
    serve: Callable[..., Served], sqlite_url: str
) -> None:
    """Just under the byte limit, one long message and many short ones: parsed, sized
    and fitted (the estimate of a long transcript is worked out off the loop)."""
    gateway = serve(sqlite_url)
    long = one_long_message(4 * 2**20 - 1000, model="nowhere")
    short = json.dumps(
        {"model": "nowhere", "messages": [{"role": "user", "content": "x" * 2000}] * 2048}
    ).encode()
    assert len(short) < 4 * 2**20
    for body in (long, short):
        answered, stall = gateway.ticker.measure(
            partial(gateway.post, "/v1/chat/completions", body)
        )
        assert answered.status_code == 503, answered.text[:300]  # fitted; its model is down
        assert answered.json()["error"]["code"] == "upstream_unavailable"
        assert stall < STALL, f"the loop was held {stall:.3f} s"


def test_a_long_completions_prompt_is_answered_without_stalling_the_loop(
    serve: Callable[..., Served], sqlite_url: str
) -> None:
    """`/v1/completions` sizes its prompt (a text, or a list of one) as the chat route
    sizes messages: off the loop when it is long."""
    gateway = serve(sqlite_url)
    words = "word " * ((4 * 2**20 - 1000) // 5)
    for prompt in (words, [words]):
        body = json.dumps({"model": "nowhere", "prompt": prompt}).encode()
        answered, stall = gateway.ticker.measure(partial(gateway.post, "/v1/completions", body))
        assert answered.status_code == 503, answered.text[:300]
        assert answered.json()["error"]["code"] == "upstream_unavailable"
        assert stall < STALL, f"the loop was held {stall:.3f} s"


# ---- messages -------------------------------------------------------------------------------


def test_300000_messages_are_refused_before_they_are_parsed(
    serve: Callable[..., Served], sqlite_url: str
) -> None:
    gateway = serve(sqlite_url, gateway_max_body_bytes=16 * 2**20)  # the count refuses it
    body = many_messages(300_000)
    refused, stall = gateway.ticker.measure(lambda: gateway.post("/v1/chat/completions", body))
    assert refused.status_code == 400
    error = error_of(refused)
    assert error["code"] == "array_above_max_length" and error["param"] == "messages"
    assert "maximum length 2048" in error["message"] and "length 300000" in error["message"]
    assert stall < STALL, f"the loop was held {stall:.3f} s"
    with pytest.raises(openai.BadRequestError) as raised:
        gateway.client().chat.completions.create(model="small", messages=HELLO * 2049)
    assert raised.value.code == "array_above_max_length"
    assert gateway.client().chat.completions.create(model="small", messages=HELLO * 2048).choices


def test_content_parts_tool_calls_inputs_and_tools_are_bounded(
    serve: Callable[..., Served], sqlite_url: str
) -> None:
    gateway = serve(sqlite_url, gateway_max_messages=50)
    client = gateway.client()
    parts: list[Any] = [{"type": "text", "text": "a"}] * 26
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": parts}] * 2
        )
    assert raised.value.code == "array_above_max_length" and raised.value.param == "messages"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="small",
            messages=[{"role": "assistant", "tool_calls": [call] * 51}, *HELLO],  # type: ignore[list-item]
        )
    assert raised.value.code == "array_above_max_length"
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="small", input=["hi"] * 51)
    assert raised.value.code == "array_above_max_length" and raised.value.param == "input"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="small", messages=HELLO, tools=[tool] * 129)  # type: ignore[list-item]
    assert raised.value.code == "array_above_max_length" and raised.value.param == "tools"
    huge = {**tool, "function": {"name": "f", "description": "d" * 2**20}}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="small", messages=HELLO, tools=[huge])  # type: ignore[list-item]
    assert raised.value.param == "tools"
    # At the bounds, all is well.
    assert client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": parts[:25]}] * 2
    ).choices


# ---- admission before parsing ---------------------------------------------------------------


def test_a_caller_over_its_limit_is_refused_before_its_body_is_read(
    serve: Callable[..., Served], database_url: str
) -> None:
    gateway = serve(database_url, rate_limit_messages=1, gateway_max_body_bytes=16 * 2**20)
    gateway.client().chat.completions.create(model="small", messages=HELLO)
    bodies = {
        "300,000 messages": many_messages(300_000),
        "9.5 MB": one_long_message(9_500_000),
        "not JSON": b"{" * 1000,  # a parse would say 400: the limit speaks first
    }
    for what, body in bodies.items():
        for route in ROUTES:
            refused, stall = gateway.ticker.measure(partial(gateway.post, route, body))
            assert refused.status_code == 429, (what, route, refused.text[:200])
            assert error_of(refused)["code"] == "rate_limit_exceeded"
            assert int(refused.headers["retry-after"]) >= 1
            assert stall < STALL, f"{what} on {route}: the loop was held {stall:.3f} s"
    # Another caller is not held up, nor refused.
    assert gateway.client("bob").chat.completions.create(model="small", messages=HELLO).choices


# ---- crafted input --------------------------------------------------------------------------

LONE_SURROGATES = {
    "escaped": b'"a\\ud800b"',
    "escaped low": b'"a\\udc00"',
    "as UTF-8 bytes": b'"a\xed\xa0\x80b"',
}


def crafted(route: str, text: bytes) -> bytes:
    if route == "/v1/chat/completions":
        return b'{"model": "small", "messages": [{"role": "user", "content": ' + text + b"}]}"
    if route == "/v1/completions":
        return b'{"model": "small", "prompt": ' + text + b"}"
    return b'{"model": "small", "input": ' + text + b"}"


def test_a_lone_surrogate_is_a_400_on_every_route_and_counting_stays_exact(
    serve: Callable[..., Served], database_url: str, upstream: FakeUpstream
) -> None:
    """A lone surrogate cannot be written as UTF-8: it once reached the tokenize endpoint,
    failed to encode, and the shared tokenizer was taken for down (everyone estimated for
    30 s), then the upstream call failed (a 500)."""
    upstream.set_engine("llamacpp")  # a tokenize endpoint: counts are exact
    gateway = serve(database_url)
    with gateway.http() as http:
        conversation = http.post("/api/conversations", json={"configuration": "small"})
    into = {"x-conversation-id": conversation.json()["id"]}
    for what, text in LONE_SURROGATES.items():
        for route in ROUTES:
            for headers in ({}, into) if route == "/v1/chat/completions" else ({},):
                refused = gateway.post(route, crafted(route, text), **headers)
                assert refused.status_code == 400, (what, route, refused.text[:200])
                message = error_of(refused)["message"]
                assert "surrogate" in message or "not valid UTF-8" in message, message
    with gateway.http() as http:
        stored = http.get(f"/api/conversations/{into['x-conversation-id']}").json()
    assert stored["messages"] == []
    answer = gateway.client("bob").chat.completions.create(model="small", messages=HELLO)
    assert webapp_of(answer)["counted_by"] == "server:small", "exact counting stayed on"
    # A surrogate pair is a character like any other.
    pair = crafted("/v1/chat/completions", b'"\\ud83d\\ude00"')
    emoji = gateway.post("/v1/chat/completions", pair)
    assert emoji.status_code == 200, emoji.text[:200]


def test_json_nested_too_deeply_is_an_openai_shaped_400(
    serve: Callable[..., Served], sqlite_url: str
) -> None:
    gateway = serve(sqlite_url)
    deep = b"[" * 100_000 + b"]" * 100_000
    for route in ROUTES:
        for body in (
            deep,
            b'{"model": "small", "messages": [' + deep + b"]}",
            b'{"model": "small", "unknown": ' + deep + b"}",
        ):
            refused = gateway.post(route, body)
            assert refused.status_code == 400, (route, refused.text[:200])
            assert "nested too deeply" in error_of(refused)["message"]


def test_every_refusal_under_v1_is_openai_shaped(
    serve: Callable[..., Served], sqlite_url: str
) -> None:
    gateway = serve(sqlite_url)
    for route in ROUTES:
        for body in (b"", b"null", b"[1]", b"{", b'{"model": 1}', b'{"messages": "x"}'):
            error_of(gateway.post(route, body))
        error_of(gateway.post(route, b"{}", **{"content-type": "text/plain"}))
    with gateway.http() as http:
        error_of(http.get("/v1/nowhere"))
        error_of(http.put("/v1/chat/completions", content=b"{}"))
