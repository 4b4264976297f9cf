"""OpenAIProvider against a real OpenAI-compatible server over real HTTP.

Every fault here is produced by the fake upstream on a real socket (statuses, stalls,
connections cut mid-stream, a closed port), so what is tested is what production meets:
httpx's own exceptions, SSE framing and timeouts, not a mock's idea of them.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.upstream import (
    FakeUpstream,
    count_chat_tokens,
    count_tokens,
    upstream,  # noqa: F401
)
from webapp.llm.providers.base import (
    ContextLengthExceeded,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    StreamBroken,
    StreamChunk,
)
from webapp.llm.providers.network import READ_AHEAD
from webapp.llm.providers.openai import (
    OpenAIProvider,
    is_context_length_message,
    parse_context_length_message,
)

API_KEY = "sk-test-VERY-SECRET-0123456789"

HELLO = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello, how are you today?"},
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}


@pytest.fixture
async def provider(upstream: FakeUpstream) -> AsyncIterator[OpenAIProvider]:  # noqa: F811
    client = OpenAIProvider(upstream.base_url, api_key=API_KEY, timeout=5.0)
    yield client
    await client.aclose()


async def collect(
    stream: AsyncIterator[StreamChunk],
) -> tuple[list[StreamChunk], BaseException | None]:
    """All chunks a stream yields, and the exception that ended it, if any."""
    chunks: list[StreamChunk] = []
    try:
        async for chunk in stream:
            chunks.append(chunk)
    except ProviderError as exc:
        return chunks, exc
    return chunks, None


async def failure(client: OpenAIProvider, streaming: bool) -> ProviderError:
    """The error a call to "small" meets before any answer: streamed, or not."""
    if streaming:
        chunks, error = await collect(client.stream_chat("small", HELLO))
        assert chunks == []
    else:
        with pytest.raises(ProviderError) as caught:
            await client.chat("small", HELLO)
        error = caught.value
    assert isinstance(error, ProviderError)
    return error


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def too_long(window: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "word " * (window + 50)}]


# ---- the happy paths ------------------------------------------------------------------


async def test_chat_returns_content_finish_reason_and_real_usage(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    result = await provider.chat("small", HELLO, max_tokens=100)

    assert (
        result.content == "Echo from small: I saw 2 messages; last said: Hello, how are you today?"
    )
    assert result.finish_reason == "stop"
    assert result.tool_calls == []
    assert result.usage is not None
    assert result.usage.prompt_tokens == count_chat_tokens(HELLO)
    assert result.usage.completion_tokens == count_tokens(result.content)
    (request,) = upstream.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["body"] == {"model": "small", "messages": HELLO, "max_tokens": 100}
    assert request["headers"]["authorization"] == f"Bearer {API_KEY}"


async def test_no_api_key_sends_no_authorization(upstream: FakeUpstream) -> None:  # noqa: F811
    async with OpenAIProvider(upstream.base_url) as client:
        await client.chat("small", HELLO)
    assert "authorization" not in upstream.requests[0]["headers"]
    assert "max_tokens" not in upstream.requests[0]["body"]


async def test_max_tokens_cuts_the_answer(provider: OpenAIProvider) -> None:
    result = await provider.chat("small", HELLO, max_tokens=3)
    assert result.finish_reason == "length"
    assert result.usage is not None and result.usage.completion_tokens == 3


async def test_stream_yields_text_in_several_chunks_then_finish_and_usage(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    expected = await provider.chat("medium", HELLO)

    chunks, error = await collect(provider.stream_chat("medium", HELLO, max_tokens=50))

    assert error is None
    texts = [c.text for c in chunks if c.text]
    assert len(texts) > 1
    assert "".join(texts) == expected.content
    final = chunks[-1]
    assert final.text == ""
    assert final.finish_reason == "stop"
    assert final.usage is not None
    assert final.usage.prompt_tokens == count_chat_tokens(HELLO)
    assert final.usage.completion_tokens == count_tokens(expected.content)
    body = upstream.requests[-1]["body"]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 50


async def test_streams_in_a_row_share_one_connection(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    """A finished stream is read to its end, so its connection goes back to the pool:
    a new connection per answer was measured at ~3 ms of CPU each under load."""
    for _ in range(3):
        chunks, error = await collect(provider.stream_chat("small", HELLO))
        assert error is None and chunks[-1].finish_reason == "stop"
    ports = {r["client_port"] for r in upstream.requests if r["path"] == "/v1/chat/completions"}
    assert len(ports) == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    """Servers close idle connections (uvicorn, under vLLM, after 5 s); the pool must
    see that one is gone before it sends on it, or the next answer fails outright."""
    with FakeUpstream(keep_alive=0.2) as up:
        async with OpenAIProvider(up.base_url, timeout=5.0) as client:
            for _ in range(2):
                chunks, error = await collect(client.stream_chat("small", HELLO))
                assert error is None and chunks[-1].finish_reason == "stop"
                await asyncio.sleep(0.6)
            assert (await client.chat("small", HELLO)).finish_reason == "stop"
        ports = [r["client_port"] for r in up.requests if r["path"] == "/v1/chat/completions"]
    assert len(set(ports)) == 3


async def test_a_proxy_named_by_the_environment_is_used(
    upstream: FakeUpstream,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind a proxy, HTTP(S)_PROXY reaches the provider as it reaches any httpx client
    (the proxy here is a closed port, so going through it fails); NO_PROXY exempts a
    host, which then gets the provider's own transport."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")
    async with OpenAIProvider(upstream.base_url, timeout=5.0) as client:
        chunks, error = await collect(client.stream_chat("small", HELLO))
        assert chunks == [] and isinstance(error, ProviderUnavailable)
    assert upstream.requests == []
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with OpenAIProvider(upstream.base_url, timeout=5.0) as client:
        chunks, error = await collect(client.stream_chat("small", HELLO))
        assert error is None and chunks[-1].finish_reason == "stop"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key: a private CA's server."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_an_https_upstream_signed_by_a_trusted_private_ca(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS is set up on the provider's own connections (start_tls), with the CA named
    the usual way (SSL_CERT_FILE); a stranger's certificate is refused, not trusted."""
    with FakeUpstream(tls=certificate) as up:
        assert up.base_url.startswith("https://")
        async with OpenAIProvider(up.base_url, timeout=5.0) as untrusting:
            chunks, error = await collect(untrusting.stream_chat("small", HELLO))
        assert chunks == [] and isinstance(error, ProviderUnavailable)
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
        async with OpenAIProvider(up.base_url, timeout=5.0) as client:
            for _ in range(2):
                chunks, error = await collect(client.stream_chat("small", HELLO))
                assert error is None and chunks[-1].finish_reason == "stop"
            assert (await client.chat("small", HELLO)).content
        ports = {r["client_port"] for r in up.requests if r["path"] == "/v1/chat/completions"}
    assert len(ports) == 1


async def test_a_request_larger_than_the_socket_buffer_goes_whole(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    """A request can be megabytes (a pasted file): writing it waits for the socket to
    drain (pause_writing, on both loops), and every byte arrives."""
    long = "word " * 800_000
    chunks, error = await collect(
        provider.stream_chat("huge", [{"role": "user", "content": long}], max_tokens=5)
    )
    # The server counted all 800,000 words, and answered as vLLM does to that.
    assert chunks == [] and isinstance(error, ContextLengthExceeded)
    assert upstream.requests[-1]["body"]["messages"][0]["content"] == long


async def test_an_answer_larger_than_the_read_ahead_arrives_whole(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    """A body past READ_AHEAD pauses reading from the socket until it is taken: the
    reading must resume, or the rest would wait in the kernel until the read timeout."""
    reply = "lorem ipsum " * 100_000  # 1.2 MB, nine times the read-ahead
    assert len(reply) > 4 * READ_AHEAD
    upstream.set_reply(reply)
    assert (await provider.chat("huge", HELLO)).content == reply


def test_the_upstream_turns_nagle_off() -> None:
    """Without TCP_NODELAY on its accepted sockets, a kept connection's first body chunk
    waits for a delayed ACK (~40 ms), and every benchmark through a pool measures that."""
    with FakeUpstream() as up, socket.create_connection(("127.0.0.1", up.port)) as client:
        client.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        assert client.recv(1024).startswith(b"HTTP/1.1 200")
        assert up.nodelay_of_connections() == [True]


async def test_stream_is_parsed_as_it_arrives(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    upstream.chunk_delay = 0.05
    started = time.monotonic()
    arrivals: list[float] = []
    async for chunk in provider.stream_chat("small", HELLO):
        if chunk.text:
            arrivals.append(time.monotonic() - started)
    assert len(arrivals) >= 5
    # The first words arrive long before the last ones: nothing buffers the whole body.
    assert arrivals[-1] - arrivals[0] > 0.2


async def test_stream_framed_the_long_way_reads_the_same(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    """Keep-alive comments, ids, a data-less retry event, JSON over several data lines and
    CRLF line ends are all SSE; none of them changes the answer."""
    plain, error = await collect(provider.stream_chat("small", HELLO))
    assert error is None
    upstream.frame_streams_verbosely()
    framed, error = await collect(provider.stream_chat("small", HELLO))
    assert error is None
    assert len(framed) > 2 and framed == plain
    assert framed[-1].finish_reason == "stop" and framed[-1].usage is not None


async def test_a_page_instead_of_a_stream_is_unavailable(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    """A 200 that is neither JSON nor an event stream is not read as an empty answer."""
    upstream.answer_streams_with_a_page()
    chunks, error = await collect(provider.stream_chat("small", HELLO))
    assert chunks == []
    assert isinstance(error, ProviderUnavailable) and error.retryable
    assert "text/html" in error.message and "not an event stream" in error.message


async def test_chat_with_tools_returns_the_tool_call(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    messages = [{"role": "user", "content": "Please use tool for Paris"}]

    result = await provider.chat("small", messages, tools=[WEATHER_TOOL])

    assert result.finish_reason == "tool_calls"
    assert result.content == ""
    (call,) = result.tool_calls
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "echo", "days": 1}
    assert upstream.requests[-1]["body"]["tools"] == [WEATHER_TOOL]
    assert result.usage is not None
    assert result.usage.prompt_tokens == count_chat_tokens(messages, [WEATHER_TOOL])


async def test_tool_result_then_answers_in_text(provider: OpenAIProvider) -> None:
    first = await provider.chat(
        "small", [{"role": "user", "content": "use tool please"}], tools=[WEATHER_TOOL]
    )
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "use tool please"},
        {"role": "assistant", "content": None, "tool_calls": first.tool_calls},
        {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "sunny"},
    ]
    result = await provider.chat("small", messages, tools=[WEATHER_TOOL])
    assert result.finish_reason == "stop"
    assert result.content.startswith("Echo from small: I saw 3 messages")


async def test_streamed_tool_call_does_not_crash(provider: OpenAIProvider) -> None:
    chunks, error = await collect(
        provider.stream_chat(
            "small", [{"role": "user", "content": "use tool now"}], tools=[WEATHER_TOOL]
        )
    )
    assert error is None
    assert [c.text for c in chunks if c.text] == []
    assert chunks[-1].finish_reason == "tool_calls"
    assert chunks[-1].usage is not None


async def test_complete(provider: OpenAIProvider, upstream: FakeUpstream) -> None:  # noqa: F811
    result = await provider.complete("small", "Once upon a time", max_tokens=64)
    assert result.text == "Echo from small: prompt said: Once upon a time"
    assert result.finish_reason == "stop"
    assert result.usage is not None
    assert result.usage.prompt_tokens == count_tokens("Once upon a time")
    request = upstream.requests[-1]
    assert request["path"] == "/v1/completions"
    assert request["body"] == {"model": "small", "prompt": "Once upon a time", "max_tokens": 64}


async def test_embed_returns_vectors_in_input_order(provider: OpenAIProvider) -> None:
    inputs = ["alpha", "beta", "gamma"]
    vectors = await provider.embed("small", inputs)
    singles = [(await provider.embed("small", [text]))[0] for text in inputs]
    assert vectors == singles
    assert len({tuple(v) for v in vectors}) == 3
    assert all(len(v) == 16 for v in vectors)


async def test_embed_nothing_sends_nothing(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    assert await provider.embed("small", []) == []
    assert upstream.requests == []


# ---- context length ---------------------------------------------------------------------


async def test_context_length_exceeded_names_prompt_tokens_and_limit(
    provider: OpenAIProvider,
) -> None:
    messages = too_long(1024)
    with pytest.raises(ContextLengthExceeded) as caught:
        await provider.chat("small", messages)
    error = caught.value
    assert error.prompt_tokens == count_chat_tokens(messages)
    assert error.limit == 1024
    assert error.status == 400
    assert error.retryable is False
    assert "maximum context length is 1024" in error.message
    assert "'small'" in error.message


async def test_context_length_exceeded_by_max_tokens(provider: OpenAIProvider) -> None:
    messages = [{"role": "user", "content": "word " * 900}]
    prompt = count_chat_tokens(messages)
    assert prompt < 1024
    with pytest.raises(ContextLengthExceeded) as caught:
        await provider.chat("small", messages, max_tokens=500)
    assert caught.value.prompt_tokens == prompt
    assert caught.value.limit == 1024


async def test_context_length_exceeded_in_stream_before_any_chunk(
    provider: OpenAIProvider,
) -> None:
    messages = too_long(1024)
    chunks, error = await collect(provider.stream_chat("small", messages))
    assert chunks == []
    assert isinstance(error, ContextLengthExceeded)
    assert error.prompt_tokens == count_chat_tokens(messages)
    assert error.limit == 1024


async def test_context_length_exceeded_for_completion_and_embedding(
    provider: OpenAIProvider,
) -> None:
    prompt = "word " * 1100
    with pytest.raises(ContextLengthExceeded) as caught:
        await provider.complete("small", prompt, max_tokens=10)
    assert (caught.value.prompt_tokens, caught.value.limit) == (count_tokens(prompt), 1024)
    with pytest.raises(ContextLengthExceeded) as caught:
        await provider.embed("small", ["short", prompt])
    assert (caught.value.prompt_tokens, caught.value.limit) == (count_tokens(prompt), 1024)


async def test_the_same_prompt_fits_a_bigger_model(provider: OpenAIProvider) -> None:
    result = await provider.chat("medium", too_long(1024))
    assert result.finish_reason == "stop"


# ---- status errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
async def test_429_maps_to_rate_limited(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
    streaming: bool,
) -> None:
    upstream.fail_next(429, retry_after=7)
    error = await failure(provider, streaming)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 7.0
    assert error.retryable is True
    assert error.status == 429
    # The fault was used up: the next call succeeds.
    assert (await provider.chat("small", HELLO)).finish_reason == "stop"


async def test_429_without_retry_after(provider: OpenAIProvider, upstream: FakeUpstream) -> None:  # noqa: F811
    upstream.fail_next(429)
    with pytest.raises(RateLimited) as caught:
        await provider.chat("small", HELLO)
    assert caught.value.retry_after is None


@pytest.mark.parametrize("status", [500, 502, 503])
@pytest.mark.parametrize("streaming", [False, True])
async def test_5xx_is_unavailable(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
    status: int,
    streaming: bool,
) -> None:
    upstream.fail_next(status)
    error = await failure(provider, streaming)
    assert isinstance(error, ProviderUnavailable)
    assert error.retryable is True
    assert error.status == status
    assert f"HTTP {status}" in error.message


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_errors_are_not_retryable_and_never_show_the_key(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
    status: int,
) -> None:
    upstream.fail_next(status)
    with pytest.raises(ProviderError) as caught:
        await provider.chat("small", HELLO)
    error = caught.value
    assert type(error) is ProviderError
    assert error.retryable is False
    assert error.status == status
    assert f"HTTP {status}" in error.message
    assert API_KEY not in str(error)
    if status == 401:
        # The server echoed the key in full; the provider's message keeps the rest.
        assert "Incorrect API key provided: [redacted]" in error.message


async def test_unknown_model_is_a_plain_error(provider: OpenAIProvider) -> None:
    with pytest.raises(ProviderError) as caught:
        await provider.chat("no-such-model", HELLO)
    assert type(caught.value) is ProviderError
    assert caught.value.status == 404
    assert "no-such-model" in caught.value.message


async def test_fail_next_can_target_one_model(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    upstream.fail_next(503, count=2, model="medium")
    assert (await provider.chat("small", HELLO)).finish_reason == "stop"
    for _ in range(2):
        with pytest.raises(ProviderUnavailable):
            await provider.chat("medium", HELLO)
    assert (await provider.chat("medium", HELLO)).finish_reason == "stop"


# ---- the network failing ------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
async def test_connection_refused_is_unavailable(streaming: bool) -> None:
    async with OpenAIProvider(f"http://127.0.0.1:{closed_port()}/v1", api_key=API_KEY) as client:
        error = await failure(client, streaming)
    assert isinstance(error, ProviderUnavailable)
    assert "cannot connect" in error.message
    assert API_KEY not in str(error)


@pytest.mark.parametrize("streaming", [False, True])
async def test_stall_beyond_the_timeout_is_unavailable(
    upstream: FakeUpstream,  # noqa: F811
    streaming: bool,
) -> None:
    upstream.stall(1.5)
    async with OpenAIProvider(upstream.base_url, timeout=0.5) as client:
        started = time.monotonic()
        error = await failure(client, streaming)
        elapsed = time.monotonic() - started
    assert isinstance(error, ProviderUnavailable)
    assert "0.5 s" in error.message
    assert elapsed < 1.4


async def test_stall_inside_a_stream_breaks_it(upstream: FakeUpstream) -> None:  # noqa: F811
    upstream.stall(1.5, before_first_chunk=False)
    async with OpenAIProvider(upstream.base_url, timeout=0.5) as client:
        chunks, error = await collect(client.stream_chat("small", HELLO))
    assert [c.text for c in chunks] == ["Echo "]
    assert isinstance(error, StreamBroken)
    assert error.retryable is False


async def test_stream_cut_mid_way_is_broken_after_the_chunks_that_arrived(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    upstream.break_stream_after(3)
    chunks, error = await collect(provider.stream_chat("small", HELLO))
    assert [c.text for c in chunks] == ["Echo ", "from ", "small: "]
    assert isinstance(error, StreamBroken)
    assert "partial answer" in error.message
    assert API_KEY not in str(error)
    # Only that stream was cut.
    chunks, error = await collect(provider.stream_chat("small", HELLO))
    assert error is None and chunks[-1].finish_reason == "stop"


async def test_stream_cut_before_any_text_is_unavailable(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    upstream.break_stream_after(0)
    chunks, error = await collect(provider.stream_chat("small", HELLO))
    assert chunks == []
    assert isinstance(error, ProviderUnavailable)


async def test_the_key_never_appears_in_any_error(upstream: FakeUpstream) -> None:  # noqa: F811
    async with OpenAIProvider(upstream.base_url, api_key=API_KEY, timeout=0.5) as client:
        errors: list[BaseException] = []
        for status in (401, 403, 429, 500, 503):
            upstream.fail_next(status, retry_after=1)
            with pytest.raises(ProviderError) as caught:
                await client.chat("small", HELLO)
            errors.append(caught.value)
        with pytest.raises(ProviderError) as caught:
            await client.chat("small", too_long(1024))
        errors.append(caught.value)
        upstream.stall(1.0)
        with pytest.raises(ProviderError) as caught:
            await client.chat("small", HELLO)
        errors.append(caught.value)
        upstream.break_stream_after(2)
        _, broken = await collect(client.stream_chat("small", HELLO))
        assert broken is not None, "the broken stream raised"
        errors.append(broken)
        assert API_KEY not in repr(client)
    assert len(errors) == 8
    for error in errors:
        assert error is not None
        assert API_KEY not in str(error)
        assert API_KEY not in repr(error.args)


# ---- reading the many ways of saying "too long" ------------------------------------------------

PHRASINGS = [
    pytest.param(
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens. Please reduce the length of the messages.",
        9000,
        8192,
        id="openai-chat",
    ),
    pytest.param(
        "This model's maximum context length is 8192 tokens. However, you requested 9500 "
        "tokens (8000 in the messages, 500 in the functions, and 1000 in the completion). "
        "Please reduce the length of the messages, functions, or completion.",
        8500,
        8192,
        id="openai-chat-functions",
    ),
    pytest.param(
        "This model's maximum context length is 4097 tokens, however you requested 4231 "
        "tokens (3975 in your prompt; 256 for the completion). Please reduce your prompt; "
        "or completion length.",
        3975,
        4097,
        id="openai-completions",
    ),
    pytest.param(
        "This model's maximum context length is 4096 tokens. However, you requested 5000 "
        "tokens (4800 in the messages, 200 in the completion). Please reduce the length of "
        "the messages or completion.",
        4800,
        4096,
        id="vllm",
    ),
    pytest.param(
        "'max_tokens' or 'max_completion_tokens' is too large: 200. This model's maximum "
        "context length is 4096 tokens and your request has 4800 input tokens "
        "(200 > 4096 - 4800).",
        4800,
        4096,
        id="vllm-new",
    ),
    pytest.param(
        "The prompt (total length 25938) is too long to fit into the model (context length "
        "4096). Make sure that `max_model_len` is no smaller than the number of text tokens.",
        25938,
        4096,
        id="vllm-engine",
    ),
    pytest.param(
        "Input prompt (5000 tokens) is too long and exceeds limit of 4096",
        5000,
        4096,
        id="vllm-input-prompt",
    ),
    pytest.param(
        "The decoder prompt (length 5000) is longer than the maximum model length of 4096. "
        "Make sure that `max_model_len` is no smaller than the number of text tokens.",
        5000,
        4096,
        id="vllm-decoder",
    ),
    pytest.param(
        "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
        4476,
        4096,
        id="llama.cpp",
    ),
    pytest.param(
        "the request exceeds the available context size, try increasing the context size or "
        "enable context shift",
        None,
        None,
        id="llama.cpp-old",
    ),
    pytest.param(
        "prompt too long; exceeded max context length by 100 tokens",
        None,
        None,
        id="ollama",
    ),
    pytest.param("the input length exceeds the context length", None, None, id="ollama-embeddings"),
    pytest.param(
        "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
        "maximum context length",
        40000,
        32768,
        id="mistral",
    ),
    pytest.param(
        "Trying to keep the first 5000 tokens when context the overflows. However, the model "
        "is loaded with context length of only 4096 tokens, which is not enough.",
        5000,
        4096,
        id="lm-studio",
    ),
    pytest.param(
        "The input token count (9000) exceeds the maximum number of tokens allowed (8192).",
        9000,
        8192,
        id="gemini",
    ),
    pytest.param(
        "The input (516368 tokens) is longer than the model's context length (262144 tokens).",
        516368,
        262144,
        id="together",
    ),
    pytest.param(
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: "
        "4000 `inputs` tokens and 200 `max_new_tokens`",
        4000,
        4096,
        id="tgi",
    ),
    pytest.param(
        "prompt is too long: 210,000 tokens > 200,000 maximum", 210000, 200000, id="anthropic"
    ),
]


@pytest.mark.parametrize(("message", "prompt_tokens", "limit"), PHRASINGS)
def test_context_length_phrasings(
    message: str, prompt_tokens: int | None, limit: int | None
) -> None:
    assert is_context_length_message(message)
    assert parse_context_length_message(message) == (prompt_tokens, limit)


@pytest.mark.parametrize(
    "message",
    [
        "Rate limit reached for gpt-4 in organization org-x on tokens per min (TPM): "
        "Limit 10000, Used 9000, Requested 2000.",
        "Incorrect API key provided: sk-abc***xyz.",
        "The model `gpt-5` does not exist or you do not have access to it.",
        "max_tokens is too large: 5000. This model supports at most 4096 completion tokens.",
        "The server is overloaded or not ready yet.",
    ],
)
def test_other_errors_are_not_context_length(message: str) -> None:
    assert not is_context_length_message(message)


def test_error_codes_alone_are_recognised() -> None:
    assert is_context_length_message("too long", code="context_length_exceeded")
    assert is_context_length_message("", code="exceed_context_size_error")
    assert not is_context_length_message("bad", code="invalid_api_key")


async def test_sent_is_called_once_the_request_is_written_not_when_the_answer_comes(
    provider: OpenAIProvider,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    upstream.stall(0.4)
    sent: list[float] = []
    started = time.monotonic()
    stream = provider.stream_chat("small", HELLO, sent=lambda: sent.append(time.monotonic()))
    first = await anext(stream)
    arrived = time.monotonic()
    rest, error = await collect(stream)
    assert first.text and error is None and rest[-1].finish_reason == "stop"
    assert len(sent) == 1, "once per request"
    assert sent[0] - started < 0.3 <= arrived - started, "sent before the engine answered"
    assert upstream.requests[-1]["path"] == "/v1/chat/completions"


async def test_sent_is_not_called_for_a_request_that_never_left() -> None:
    provider = OpenAIProvider(f"http://127.0.0.1:{closed_port()}/v1", timeout=2.0)
    sent: list[float] = []
    try:
        chunks, error = await collect(
            provider.stream_chat("small", HELLO, sent=lambda: sent.append(0.0))
        )
    finally:
        await provider.aclose()
    assert chunks == [] and isinstance(error, ProviderUnavailable)
    assert sent == []


async def test_sent_waits_for_the_request_not_the_tunnel_behind_an_https_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpcore hands the request's trace hook to the CONNECT that opens a proxy's
    tunnel too: a tunnel refused means the request never left."""

    async def refusing_proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    proxy = await asyncio.start_server(refusing_proxy, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    provider = OpenAIProvider("https://engine.example/v1", timeout=2.0)
    sent: list[float] = []
    try:
        chunks, error = await collect(
            provider.stream_chat("small", HELLO, sent=lambda: sent.append(0.0))
        )
    finally:
        await provider.aclose()
        proxy.close()
        await proxy.wait_closed()
    assert chunks == [] and isinstance(error, ProviderUnavailable)
    assert sent == []
