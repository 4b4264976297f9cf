"""The OpenAI-compatible gateway (/v1), driven by the official `openai` client over real
HTTP: the app served by uvicorn on a free port, its catalog pointing at the fake upstream
(tests/upstream/), which enforces each model's window with cl100k."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

from tests.factories import PASSWORD, csrf_from
from tests.served import Gateway, webapp_of
from tests.upstream import FakeUpstream, _embedding, count_chat_tokens, count_tokens
from webapp.llm.estimator import REPLY_PRIMING, estimate_text
from webapp.web import events


@pytest.fixture
def gateway(serve: Callable[..., Gateway], sqlite_url: str) -> Gateway:
    return serve(sqlite_url)


def long_transcript(turns: int, words: int = 60) -> list[ChatCompletionMessageParam]:
    """A system prompt and `turns` exchanges of about `words` words each, then a question."""
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": "You are terse."}]
    for turn in range(turns):
        text = " ".join(f"turn{turn}word{i}" for i in range(words))
        messages += [
            {"role": "user", "content": f"Question {turn}: {text}"},
            {"role": "assistant", "content": f"Answer {turn}: {text}"},
        ]
    messages.append({"role": "user", "content": "And the newest question?"})
    return messages


def text_of(answer: ChatCompletion) -> str:
    """The text of an answer's first choice, which must have one."""
    content = answer.choices[0].message.content
    assert content is not None, answer
    return content


# ---- models ---------------------------------------------------------------------------------


def test_models_are_the_configurations(gateway: Gateway) -> None:
    client = gateway.client()
    ids = [model.id for model in client.models.list()]
    assert ids[:2] == ["small", "medium"] and "cheapest-4k" in ids
    criteria = client.models.retrieve("cheapest-4k")
    assert webapp_of(criteria)["kind"] == "criteria" and webapp_of(criteria)["model"] == "medium"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-17")
    assert missing.value.code == "model_not_found"


# ---- chat -----------------------------------------------------------------------------------


def test_a_transcript_far_over_the_window_succeeds_and_says_what_it_left_out(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    messages = long_transcript(turns=20)
    assert count_chat_tokens(messages) > 5 * 1024  # the small model would refuse it whole
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="small", messages=messages, max_tokens=50
    )
    answer = raw.parse()
    report = webapp_of(answer)
    dropped = int(raw.headers["x-dropped-turns"])
    assert dropped == report["dropped_turns"] > 0
    assert report["model"] == "small" and report["window"] == 1024
    assert report["reserve"] == 50 and report["budget"] == 1024 - 50 - 31
    assert report["estimated_tokens"] <= report["budget"]
    assert report["configuration"] == "small" and report["counted_by"]
    sent = upstream.requests[-1]["body"]
    assert sent["max_tokens"] == 50
    # The head (system prompt, first exchange) and the newest turn were sent, in order.
    assert sent["messages"][:3] == messages[:3] and sent["messages"][-1] == messages[-1]
    assert len(sent["messages"]) == len(messages) - 2 * dropped
    assert text_of(answer).startswith(f"Echo from small: I saw {len(sent['messages'])} messages")
    assert answer.usage is not None
    assert answer.model == "small" and answer.usage.prompt_tokens == count_chat_tokens(
        sent["messages"]
    )
    # The messages right after the head: indices 3 .. 3 + 2*dropped - 1.
    assert report["left_out"] == [[3, 2 + 2 * dropped]]


def test_a_transcript_that_fits_is_sent_whole(gateway: Gateway, upstream: FakeUpstream) -> None:
    messages = long_transcript(turns=1, words=5)
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="large", messages=messages
    )
    assert raw.headers["x-dropped-turns"] == "0"
    report = webapp_of(raw.parse())
    assert report["dropped_turns"] == 0 and report["model"] == "large"
    assert report["left_out"] == []
    assert upstream.requests[-1]["body"]["messages"] == messages
    assert "prompt_cache_key" not in upstream.requests[-1]["body"], "the caller gave none"


def test_a_stateless_call_carries_a_key_only_when_the_caller_gave_one(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    client = gateway.client()
    messages = long_transcript(turns=1, words=5)
    for given in ({"prompt_cache_key": "mine"}, {"prompt_cache_key": "mine"}, {"user": "mine"}):
        client.chat.completions.create(model="large", messages=messages, extra_body=given)
    first, again, by_user = (r["body"].get("prompt_cache_key") for r in upstream.requests[-3:])
    assert first and first == again and "mine" not in first, "derived, and the same each call"
    assert by_user and by_user != first


def test_a_fallback_model_refits_against_its_own_window(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    upstream.fail_next(503, model="small")
    messages = long_transcript(turns=20)
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="small-then-medium", messages=messages
    )
    report = webapp_of(raw.parse())
    assert report["model"] == "medium" and report["window"] == 4096
    assert 0 < report["dropped_turns"] < 19 and raw.headers["x-dropped-turns"] == str(
        report["dropped_turns"]
    )
    assert raw.parse().model == "medium"


def test_streaming_is_bounded_before_the_first_chunk(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    messages = long_transcript(turns=20)
    with gateway.client().chat.completions.with_streaming_response.create(
        model="small",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        dropped = int(response.headers["x-dropped-turns"])
        chunks = list(response.parse())
    assert dropped > 0
    first, last_choice, usage_chunk = chunks[0], chunks[-2], chunks[-1]
    assert first.choices[0].delta.role == "assistant"
    assert webapp_of(first)["dropped_turns"] == dropped == webapp_of(last_choice)["dropped_turns"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    sent = upstream.requests[-1]["body"]["messages"]
    assert text.startswith(f"Echo from small: I saw {len(sent)} messages")
    assert len({c.id for c in chunks}) == 1
    assert last_choice.choices[0].finish_reason == "stop"
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.prompt_tokens == count_chat_tokens(sent)
    assert sum(len(c.choices[0].delta.content or "") > 0 for c in chunks if c.choices) >= 3


def test_streaming_without_usage_sends_no_usage_chunk(gateway: Gateway) -> None:
    stream = gateway.client().chat.completions.create(
        model="small", messages=[{"role": "user", "content": "Hi there"}], stream=True
    )
    chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(chunk.usage is None for chunk in chunks)


def test_pings_in_a_quiet_stream_are_skipped_by_the_openai_client(
    gateway: Gateway, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's streams are pinged as the pages' are (`webapp.web.events`): the
    comment lines are on the wire between the chunks, and the official client, reading
    the same stream, gets every chunk and nothing else."""
    monkeypatch.setattr(events, "PING_SECONDS", 0.02)
    upstream.set_reply("one two three four five")
    upstream.chunk_delay = 0.1
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say five words"}]
    request = {"model": "small", "messages": hello, "stream": True}
    with gateway.http() as http, http.stream("POST", "/v1/chat/completions", json=request) as raw:
        wire = b"".join(raw.iter_bytes())
    assert wire.count(b"\n: ping - ") >= 5 and wire.endswith(b"data: [DONE]\n\n")
    stream = gateway.client().chat.completions.create(model="small", messages=hello, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "one two three four five"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert len(chunks) == wire.count(b"data: {")


def test_stream_failures_before_and_after_the_first_chunk(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    client = gateway.client()
    hello: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Hello, anyone there today?"}
    ]
    upstream.fail_next(503)
    with pytest.raises(openai.APIStatusError) as before:
        client.chat.completions.create(model="small", messages=hello, stream=True)
    assert before.value.status_code == 503 and before.value.code == "upstream_unavailable"
    assert "127.0.0.1" not in before.value.message  # the upstream's address stays in the log
    upstream.break_stream_after(2)
    stream = client.chat.completions.create(model="small", messages=hello, stream=True)
    with pytest.raises(openai.APIError):
        for _ in stream:
            pass


WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city. " + "Mention every detail you know. " * 40,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_a_tool_call_with_schemas_counted(gateway: Gateway, upstream: FakeUpstream) -> None:
    client = gateway.client()
    messages = long_transcript(turns=8, words=20)
    messages[-1] = {"role": "user", "content": "Please use tool for Paris."}
    plain = webapp_of(client.chat.completions.create(model="small", messages=messages))
    answer = client.chat.completions.create(model="small", messages=messages, tools=[WEATHER_TOOL])
    report = webapp_of(answer)
    # The schema is on the wire, so it costs budget: more of the history had to go.
    assert count_tokens(json.dumps([WEATHER_TOOL])) > 200
    assert report["dropped_turns"] > plain["dropped_turns"]
    assert upstream.requests[-1]["body"]["tools"] == [WEATHER_TOOL]
    [call] = answer.choices[0].message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert answer.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "echo"
    }
    # The tool's result goes back with the call it answers, and the model answers it.
    follow_up: list[Any] = [  # the answer's message sent back as the SDK's users do
        *messages,
        answer.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'},
    ]
    final = client.chat.completions.create(model="small", messages=follow_up, tools=[WEATHER_TOOL])
    sent = upstream.requests[-1]["body"]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == call.id and sent[-1]["tool_call_id"] == call.id
    assert text_of(final).startswith("Echo from small")
    # tool_choice "none": no schema is sent, so none is counted.
    none = client.chat.completions.create(
        model="small", messages=messages, tools=[WEATHER_TOOL], tool_choice="none"
    )
    assert "tools" not in upstream.requests[-1]["body"]
    assert webapp_of(none)["dropped_turns"] == plain["dropped_turns"]


def test_a_streamed_tool_call(gateway: Gateway) -> None:
    stream = gateway.client().chat.completions.create(
        model="medium",
        messages=[{"role": "user", "content": "Please use tool now."}],
        tools=[WEATHER_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert webapp_of(chunks[0])["model"] == "medium"
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    [call] = calls
    assert call.index == 0 and call.function is not None
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments or "") == {"city": "echo"}
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    usage = chunks[-1].usage
    assert finishes[-1] == "tool_calls" and usage is not None and usage.completion_tokens > 0


# ---- completions and embeddings ------------------------------------------------------------


def test_completions_are_never_pruned_and_an_overflow_is_reported(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    client = gateway.client()
    raw = client.completions.with_raw_response.create(model="small", prompt="Once upon a time")
    small = raw.parse()
    assert raw.headers["x-completion-overflow"] == "false"
    assert webapp_of(small)["overflow"] is False and small.choices[0].text.startswith("Echo")
    # A prompt over the budget by our (high) estimate, yet within the window by cl100k.
    max_tokens = 10
    budget = 1024 - max_tokens - 31
    words: list[str] = []
    while estimate_text(" ".join(words)) + REPLY_PRIMING <= budget:
        words.append("tale")
    prompt = " ".join(words)
    assert count_tokens(prompt) + max_tokens <= 1024
    raw = client.completions.with_raw_response.create(
        model="small", prompt=prompt, max_tokens=max_tokens
    )
    report = webapp_of(raw.parse())
    assert raw.headers["x-completion-overflow"] == "true"
    assert report["overflow"] is True and report["budget"] == budget
    assert report["estimated_tokens"] > budget and report["model"] == "small"
    assert upstream.requests[-1]["body"]["prompt"] == prompt  # sent whole
    # Far over the window: sent whole all the same, and the model's refusal is a 400.
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="small", prompt="tale " * 3000, max_tokens=max_tokens)
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "prompt"
    assert upstream.requests[-1]["body"]["prompt"] == "tale " * 3000


def test_embeddings_are_passed_through(gateway: Gateway, upstream: FakeUpstream) -> None:
    client = gateway.client()
    texts = ["first text", "second text " * 200]
    # The openai client asks for base64 by default and decodes it.
    result = client.embeddings.create(model="small", input=texts)
    assert [item.index for item in result.data] == [0, 1]
    for item, text in zip(result.data, texts, strict=True):
        assert item.embedding == pytest.approx(_embedding(text), abs=1e-6)
    assert upstream.requests[-1]["body"]["input"] == texts
    floats = client.embeddings.create(model="small", input="first text", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(_embedding("first text"), abs=1e-6)
    with gateway.http() as http:
        raw = http.post(
            "/v1/embeddings",
            json={"model": "small", "input": "first text", "encoding_format": "base64"},
        )
    packed = base64.b64decode(raw.json()["data"][0]["embedding"])
    assert list(struct.unpack("<16f", packed)) == pytest.approx(_embedding("first text"), abs=1e-6)


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "small"}, "messages"),
        ({"model": "small", "messages": []}, "messages"),
        ({"model": "small", "messages": "hello"}, "messages"),
        ({"model": "small", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "small", "messages": [{"role": "user"}]}, "messages[0]"),
        ({"model": "small", "messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        (
            {"model": "small", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens",
        ),
        (
            {"model": "small", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"},
            "max_tokens",
        ),
        ({"model": "small", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        (
            {
                "model": "small",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function"}],
            },
            "tools[0].function",
        ),
        (
            {
                "model": "small",
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": "required",
            },
            "tool_choice",
        ),
    ],
)
def test_bad_chat_requests_get_an_openai_400_naming_the_param(
    gateway: Gateway, upstream: FakeUpstream, body: dict[str, Any], param: str
) -> None:
    with gateway.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"]
    assert upstream.requests == []  # nothing was sent


def test_other_bad_requests_get_openai_errors(gateway: Gateway, upstream: FakeUpstream) -> None:
    client = gateway.client()
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-17", messages=hello)
    assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
    with pytest.raises(openai.BadRequestError) as streamed:
        client.completions.create(model="small", prompt="x", stream=True)
    assert streamed.value.param == "stream"
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model="small", input=[])
    assert empty.value.param == "input"
    with gateway.http() as http:
        for path, content in [
            ("/v1/chat/completions", b"{not json"),
            ("/v1/completions", b"[1, 2]"),
            ("/v1/embeddings", b""),
        ]:
            response = http.post(
                path, content=content, headers={"content-type": "application/json"}
            )
            assert response.status_code == 400, (path, response.text)
            assert response.json()["error"]["type"] == "invalid_request_error"
        nowhere = http.get("/v1/nowhere")
        assert nowhere.status_code == 404 and nowhere.json()["error"]["message"]
        wrong_method = http.get("/v1/chat/completions")
        assert wrong_method.status_code == 405 and "error" in wrong_method.json()
    assert upstream.requests == []


def test_the_gateway_takes_api_tokens_only(gateway: Gateway) -> None:
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.AuthenticationError) as bad:
        gateway.client(api_key="wa_not-a-token").models.list()
    assert bad.value.code == "invalid_api_key"
    with gateway.http(None) as anonymous:
        for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions")]:
            response = anonymous.request(method, path, json={"model": "small", "messages": hello})
            assert response.status_code == 401, (path, response.text)
            assert response.json()["error"]["code"] == "invalid_api_key"
        # A browser's session cookie (and its CSRF token) does not authenticate here.
        form = anonymous.get("/login")
        signed_in = anonymous.post(
            "/login",
            data={
                "username": "alice",
                "password": PASSWORD,
                "_csrf_token": csrf_from(form.text),
            },
            follow_redirects=False,
        )
        assert signed_in.status_code == 303 and anonymous.cookies.get("webapp_session")
        assert anonymous.get("/api/conversations").status_code == 200
        csrf = csrf_from(anonymous.get("/", follow_redirects=True).text)
        assert anonymous.get("/v1/models").status_code == 401
        cookie_call = anonymous.post(
            "/v1/chat/completions",
            json={"model": "small", "messages": hello},
            headers={"x-csrftoken": csrf},
        )
        assert cookie_call.status_code == 401, cookie_call.text


# ---- rate limits ----------------------------------------------------------------------------


def test_gateway_calls_are_rate_limited_per_user(
    serve: Callable[..., Gateway], database_url: str, upstream: FakeUpstream
) -> None:
    gateway = serve(database_url, rate_limit_messages=3, rate_limit_window=60)
    alice = gateway.client()
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    alice.chat.completions.create(model="small", messages=hello)
    alice.embeddings.create(model="small", input="hello")
    alice.completions.create(model="small", prompt="hello")
    calls = len(upstream.requests)
    with pytest.raises(openai.RateLimitError) as refused:
        alice.chat.completions.create(model="small", messages=hello)
    assert refused.value.code == "rate_limit_exceeded"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    assert len(upstream.requests) == calls  # refused before anything was sent
    assert [m.id for m in alice.models.list()]  # listing calls no model: never refused


def test_parallel_calls_cannot_slip_past_the_limit(
    serve: Callable[..., Gateway], database_url: str, upstream: FakeUpstream
) -> None:
    gateway = serve(database_url, rate_limit_messages=3, rate_limit_window=60)

    def call(_: int) -> int:
        with gateway.http() as http:
            return http.post("/v1/embeddings", json={"model": "small", "input": "hi"}).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = sorted(pool.map(call, range(8)))
    assert statuses == [200] * 3 + [429] * 5
    # (Counted by path: a first start also asks the upstream for its models.)
    assert [r["path"] for r in upstream.requests].count("/v1/embeddings") == 3


def test_parallel_sends_in_different_conversations_cannot_slip_past_the_limit(
    serve: Callable[..., Gateway], database_url: str
) -> None:
    """Each send locks its own conversation; the owner's budget needs a lock of its own,
    or on PostgreSQL (READ COMMITTED) sends side by side each count without the others.
    Gateway calls take the same lock, since they spend the same budget."""
    gateway = serve(database_url, rate_limit_messages=3, rate_limit_window=60)
    with gateway.http() as http:
        conversations = [
            http.post("/api/conversations", json={"configuration": "small"}).json()["id"]
            for _ in range(8)
        ]

    def send(index: int) -> int:
        with gateway.http() as http:
            if index % 4 == 3:  # some gateway calls among the sends
                body = {"model": "small", "input": "hi"}
                return http.post("/v1/embeddings", json=body).status_code
            url = f"/api/conversations/{conversations[index]}/messages"
            return http.post(url, json={"content": f"hello {index}"}).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = sorted(pool.map(send, range(8)))
    assert statuses.count(429) == 5, statuses
    assert sorted(set(statuses) - {429}) in ([200], [201], [200, 201]), statuses


def test_chat_sends_and_gateway_calls_share_the_limit(
    serve: Callable[..., Gateway], database_url: str
) -> None:
    gateway = serve(database_url, rate_limit_messages=2, rate_limit_window=60)
    with gateway.http() as http:
        conversation = http.post("/api/conversations", json={"configuration": "small"}).json()
        sent = http.post(
            f"/api/conversations/{conversation['id']}/messages", json={"content": "hi"}
        )
        assert sent.status_code == 201
    alice, bob = gateway.client(), gateway.client("bob")
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    alice.chat.completions.create(model="small", messages=hello)
    with pytest.raises(openai.RateLimitError):
        alice.chat.completions.create(model="small", messages=hello)
    # A call into a conversation is counted by its stored message, and sees the calls too.
    with pytest.raises(openai.RateLimitError) as refused:
        alice.chat.completions.create(
            model="small", messages=hello, extra_headers={"x-conversation-id": conversation["id"]}
        )
    assert int(refused.value.response.headers["retry-after"]) >= 1
    with gateway.http() as http:
        assert len(http.get(f"/api/conversations/{conversation['id']}").json()["messages"]) == 2
    # Each user has a limit of their own.
    bob.chat.completions.create(model="small", messages=hello)
    bob.chat.completions.create(model="small", messages=hello)
    # And the chat counts the gateway's calls too: Bob's limit is spent.
    with gateway.http("bob") as http:
        theirs = http.post("/api/conversations", json={"configuration": "small"}).json()
        refused_send = http.post(
            f"/api/conversations/{theirs['id']}/messages", json={"content": "hi"}
        )
        assert refused_send.status_code == 429, refused_send.text
        assert int(refused_send.headers["retry-after"]) >= 1
        assert http.get(f"/api/conversations/{theirs['id']}").json()["messages"] == []


# ---- x-conversation-id ----------------------------------------------------------------------


def _conversation(gateway: Gateway, user: str = "alice", configuration: str = "small") -> str:
    with gateway.http(user) as http:
        response = http.post("/api/conversations", json={"configuration": configuration})
        assert response.status_code == 201, response.text
        return response.json()["id"]


def test_a_call_in_a_conversation_carries_the_conversations_key(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    """The same key as the conversation's sends from the page or the API: the gateway's
    call is a send of that conversation, so it goes where the conversation's cache is."""

    def sent(text: str) -> dict[str, Any]:
        return next(
            r["body"]
            for r in reversed(upstream.requests)
            if r["path"].endswith("/chat/completions")
            and r["body"]["messages"][-1].get("content") == text
        )

    conversation_id = _conversation(gateway)
    with gateway.http() as http:
        answered = http.post(
            f"/api/conversations/{conversation_id}/messages", json={"content": "Hello there"}
        )
        assert answered.status_code == 201, answered.text
    gateway.client().chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": "And again"}],
        extra_headers={"x-conversation-id": conversation_id},
    )
    key = sent("Hello there")["prompt_cache_key"]
    assert key and conversation_id not in key
    assert sent("And again")["prompt_cache_key"] == key


def test_a_call_in_a_conversation_is_stored_with_its_fit(
    serve: Callable[..., Gateway], database_url: str, upstream: FakeUpstream
) -> None:
    gateway = serve(database_url)
    conversation_id = _conversation(gateway)
    client = gateway.client()
    header = {"x-conversation-id": conversation_id}
    reports = []
    for turn in range(6):
        text = f"Turn {turn}: " + " ".join(f"word{turn}x{i}" for i in range(60))
        raw = client.chat.completions.with_raw_response.create(
            model="small",
            # Only the last message is new: the conversation holds the history.
            messages=[{"role": "user", "content": "DECOY"}, {"role": "user", "content": text}],
            extra_headers=header,
        )
        assert raw.headers["x-conversation-id"] == conversation_id
        answer = raw.parse()
        reports.append((int(raw.headers["x-dropped-turns"]), webapp_of(answer)))
        assert text_of(answer).startswith("Echo from small")
        sent = upstream.requests[-1]["body"]["messages"]
        assert sent[0] == {"role": "system", "content": "You are a test model."}
        assert sent[-1]["content"] == text and "DECOY" not in json.dumps(sent)
    dropped, report = reports[-1]
    assert dropped == report["dropped_turns"] > 0 and report["model"] == "small"
    assert report["conversation_id"] == conversation_id
    assert report["trim_to"] == 0.75 and isinstance(report["cut_moved"], bool)
    assert report["cached_tokens"] == upstream.cache_log[-1].cached_tokens
    # Stored: every message (history is never shortened), the fit on the user row, the
    # serving model and usage on the answer; `left_out` names stored seqs (turn 1 onward).
    with gateway.http() as http:
        stored = http.get(f"/api/conversations/{conversation_id}").json()["messages"]
        page = http.get(f"/c/{conversation_id}").text
    assert len(stored) == 12
    user_row, answer_row = stored[-2], stored[-1]
    assert user_row["id"] == report["user_message_id"]
    assert answer_row["id"] == report["assistant_message_id"]
    assert user_row["dropped_turns"] == dropped and user_row["fit"]["budget"] == report["budget"]
    assert answer_row["model"] == "small" and answer_row["usage"]["prompt_tokens"] > 0
    assert report["left_out"] == [[3, 2 + 2 * dropped]]
    assert f'data-dropped-turns="{dropped}"' in page


def test_a_streamed_call_in_a_conversation(gateway: Gateway) -> None:
    conversation_id = _conversation(gateway)
    with gateway.client().chat.completions.with_streaming_response.create(
        model="small",
        messages=[{"role": "user", "content": "Stream into my conversation"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-conversation-id": conversation_id},
    ) as response:
        assert response.headers["x-dropped-turns"] == "0"
        chunks = list(response.parse())
    assert webapp_of(chunks[0])["conversation_id"] == conversation_id
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens > 0
    with gateway.http() as http:
        stored = http.get(f"/api/conversations/{conversation_id}").json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["content"] == text and stored[1]["status"] == "complete"


def test_conversation_calls_are_the_callers_own_and_checked(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    client = gateway.client()
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    theirs = _conversation(gateway, "bob")
    with pytest.raises(openai.NotFoundError) as foreign:
        client.chat.completions.create(
            model="small", messages=hello, extra_headers={"x-conversation-id": theirs}
        )
    assert foreign.value.code == "conversation_not_found"
    mine = _conversation(gateway)
    header = {"x-conversation-id": mine}
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"model": "medium"}, "model"),
        ({"tools": [WEATHER_TOOL]}, "tools"),
        ({"max_tokens": 20}, "max_tokens"),
        ({"messages": [*hello, {"role": "assistant", "content": "hi"}]}, "messages"),
    ]
    for kwargs, param in refusals:
        call: dict[str, Any] = {"model": "small", "messages": hello, **kwargs}
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**call, extra_headers=header)
        assert refused.value.param == param
    assert upstream.requests == []
    with gateway.http() as http:
        assert http.get(f"/api/conversations/{mine}").json()["messages"] == []
        assert http.get(f"/api/conversations/{theirs}").status_code == 404


# ---- the cut that keeps the engine's cache ------------------------------------------------


def test_stateless_calls_keep_the_cut_and_say_what_the_cache_served(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    """A client that sends its whole history each call, as OpenAI clients do: between
    moves each request the engine gets is the previous one plus its answer plus the new
    turn, and the answer says what the engine's cache served, as OpenAI says it."""
    upstream.set_engine("llamacpp")  # reports `timings.cache_n`
    client = gateway.client()
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": "You are terse."}]
    previous: list[dict[str, Any]] | None = None
    reports = []
    for turn in range(24):
        words = " ".join(f"t{turn}w{i}" for i in range(30))
        messages.append({"role": "user", "content": f"Question {turn}: {words}"})
        answer = client.chat.completions.create(model="small", messages=messages, max_tokens=50)
        report = webapp_of(answer)
        reports.append(report)
        sent = upstream.requests[-1]["body"]["messages"]
        assert report["trim_to"] == 0.75
        if previous is not None and report["dropped_turns"] and not report["cut_moved"]:
            assert sent[: len(previous)] == previous and len(sent) == len(previous) + 1
        assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
        cached = answer.usage.prompt_tokens_details.cached_tokens
        assert cached == report["cached_tokens"] == upstream.cache_log[-1].cached_tokens
        content = text_of(answer)
        previous = [*sent, {"role": "assistant", "content": content}]
        messages.append({"role": "assistant", "content": content})
    trimmed = [r for r in reports if r["dropped_turns"]]
    assert len(trimmed) >= 8
    appends = [r for r in trimmed if not r["cut_moved"]]
    assert len(appends) >= 0.6 * len(trimmed), [r["cut_moved"] for r in trimmed]
    assert all(r["cached_tokens"] > 0 for r in appends)

    # A client that changes an early message starts the cut afresh.
    messages[3] = {"role": "user", "content": "Question 1, asked differently."}
    messages.append({"role": "user", "content": "And now?"})
    changed = webapp_of(client.chat.completions.create(model="small", messages=messages))
    assert changed["dropped_turns"] and changed["cut_moved"]


def test_a_streamed_stateless_call_reports_the_cached_tokens_last(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    upstream.set_engine("llamacpp")
    client = gateway.client()
    messages = long_transcript(turns=3, words=20)
    client.chat.completions.create(model="small", messages=messages)
    messages += [
        {"role": "assistant", "content": text_of_last(upstream)},
        {"role": "user", "content": "Again?"},
    ]
    chunks = list(
        client.chat.completions.create(
            model="small", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached > 0
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert webapp_of(finished[-1])["cached_tokens"] == cached


def text_of_last(upstream: FakeUpstream) -> str:
    """What the fake engine answered last (it echoes what it saw)."""
    messages = upstream.requests[-1]["body"]["messages"]
    return f"Echo from small: I saw {len(messages)} messages"
