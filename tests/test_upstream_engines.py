"""The fake upstream's engine modes behave like the real engines they stand for.

Other tests trust these behaviours (a quirk the fake lacks is a bug the app can ship),
so each is checked here on the wire.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.upstream import ENGINES, Engine, FakeUpstream, count_chat_tokens


def root(up: FakeUpstream) -> str:
    return up.base_url.removesuffix("/v1")


def chat(text: str, model: str = "medium", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


ENDPOINTS = [
    ("POST", "/tokenize", {"llamacpp", "vllm"}),
    ("POST", "/extras/tokenize", {"llama-cpp-python"}),
    ("GET", "/props", {"llamacpp"}),
    ("POST", "/api/show", {"ollama"}),
    ("GET", "/api/v0/models", {"lmstudio"}),
]


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_has_only_its_own_endpoints(
    engine: Engine, engine_upstream: FakeUpstream
) -> None:
    engine_upstream.set_engine(engine)
    body = {"content": "hi", "input": "hi", "prompt": "hi", "model": "medium"}
    for method, path, engines in ENDPOINTS:
        answer = httpx.request(method, root(engine_upstream) + path, json=body)
        expected = 200 if engine in engines else 404
        assert answer.status_code == expected, (engine, path, answer.text)
    assert httpx.post(root(engine_upstream) + "/v1/tokenize", json=body).status_code == 404


def test_vllm_refuses_llamacpp_body_and_counts_messages_with_the_template(
    engine_upstream: FakeUpstream,
) -> None:
    up = engine_upstream
    up.set_engine("vllm")
    refused = httpx.post(root(up) + "/tokenize", json={"content": "hi"})
    assert refused.status_code == 400 and refused.json()["object"] == "error"
    messages = [{"role": "user", "content": "hello there"}]
    answer = httpx.post(root(up) + "/tokenize", json={"model": "medium", "messages": messages})
    data = answer.json()
    assert data["count"] == up.count_chat(messages) == len(data["tokens"])
    assert data["max_model_len"] == up.models["medium"]
    unknown = httpx.post(root(up) + "/tokenize", json={"model": "nope", "prompt": "x"})
    assert unknown.status_code == 404 and unknown.json()["type"] == "NotFoundError"


def test_qwen_charges_chatml_overhead_and_counts_unlike_cl100k(
    engine_upstream: FakeUpstream,
) -> None:
    up = engine_upstream
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "東京の天気は？"},
        {"role": "assistant", "content": "晴れです。"},
    ]
    content = sum(up.count(m["content"]) for m in messages)
    assert up.count_chat(messages) == content + 5 * len(messages) + 3
    answer = httpx.post(up.base_url + "/chat/completions", json=chat("東京の天気は？"))
    usage = answer.json()["usage"]
    assert usage["prompt_tokens"] == up.count("東京の天気は？") + 5 + 3
    assert usage["prompt_tokens"] != count_chat_tokens(
        [{"role": "user", "content": "東京の天気は？"}]
    )


def test_the_window_is_enforced_with_the_servers_own_count(engine_upstream: FakeUpstream) -> None:
    up = engine_upstream
    up.set_models({"medium": 100})
    text = "东京 " * 40
    prompt = up.count_chat([{"role": "user", "content": text}])
    fits = httpx.post(up.base_url + "/chat/completions", json=chat(text, max_tokens=100 - prompt))
    assert fits.status_code == 200, fits.text
    over = httpx.post(
        up.base_url + "/chat/completions", json=chat(text, max_tokens=100 - prompt + 1)
    )
    assert over.status_code == 400 and over.json()["error"]["code"] == "context_length_exceeded"


def test_vllm_overflow_has_vllms_flat_error_body(engine_upstream: FakeUpstream) -> None:
    up = engine_upstream
    up.set_engine("vllm")
    up.set_models({"medium": 50})
    text = "word " * 60
    prompt = up.count_chat([{"role": "user", "content": text}])
    answer = httpx.post(up.base_url + "/chat/completions", json=chat(text, max_tokens=10))
    assert answer.status_code == 400
    assert answer.json() == {
        "object": "error",
        "message": (
            f"This model's maximum context length is 50 tokens. However, you requested "
            f"{prompt + 10} tokens ({prompt} in the messages, 10 in the completion). "
            "Please reduce the length of the messages or completion."
        ),
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    bare = httpx.post(up.base_url + "/chat/completions", json=chat(text))
    assert f"your request has {prompt} input tokens" in bare.json()["message"]


def test_llamacpp_overflow_names_prompt_and_context(engine_upstream: FakeUpstream) -> None:
    up = engine_upstream
    up.set_engine("llamacpp")
    up.set_models({"medium": 20})
    answer = httpx.post(up.base_url + "/chat/completions", json=chat("word " * 40))
    error = answer.json()["error"]
    assert (answer.status_code, error["type"], error["n_ctx"]) == (
        400,
        "exceed_context_size_error",
        20,
    )
    assert error["n_prompt_tokens"] == up.count_chat([{"role": "user", "content": "word " * 40}])


def streamed_usage(up: FakeUpstream) -> list[Any]:
    body = chat("hello", stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", up.base_url + "/chat/completions", json=body) as answer:
        events = [
            json.loads(line[6:])
            for line in answer.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    return [event["usage"] for event in events if event.get("usage")]


@pytest.mark.parametrize(
    ("engine", "reports"), [("llama-cpp-python", False), ("vllm", True), ("llamacpp", True)]
)
def test_llama_cpp_python_streams_without_usage(
    engine: Engine, reports: bool, engine_upstream: FakeUpstream
) -> None:
    """llama-cpp-python ignores stream_options: a client must not wait for usage."""
    engine_upstream.set_engine(engine)
    usage = streamed_usage(engine_upstream)
    assert bool(usage) is reports
    plain = httpx.post(engine_upstream.base_url + "/chat/completions", json=chat("hello"))
    assert plain.json()["usage"]["prompt_tokens"] > 0, "non-streamed answers carry usage"


def test_tokenize_faults_and_recording(engine_upstream: FakeUpstream) -> None:
    up = engine_upstream
    up.set_engine("llamacpp")
    up.fail_tokenize(503, count=2)
    statuses = [
        httpx.post(root(up) + "/tokenize", json={"content": "hi"}).status_code for _ in range(3)
    ]
    assert statuses == [503, 503, 200]
    up.stall_tokenize(0.3)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(root(up) + "/tokenize", json={"content": "hi"}, timeout=0.1)
    assert [r["path"] for r in up.requests] == ["/tokenize"] * 4
    assert up.requests[0]["body"] == {"content": "hi"}
    up.reset()
    assert (up.engine, up.tokenizer) == ("openai", "qwen"), "reset restores the constructor's"


def test_the_default_upstream_is_unchanged(upstream: FakeUpstream) -> None:
    """Engine "openai" with cl100k: OpenAI's counting, context_window in /v1/models."""
    assert (upstream.engine, upstream.tokenizer) == ("openai", "cl100k")
    answer = httpx.post(upstream.base_url + "/chat/completions", json=chat("hello there"))
    messages = [{"role": "user", "content": "hello there"}]
    assert answer.json()["usage"]["prompt_tokens"] == count_chat_tokens(messages)
    listed = httpx.get(upstream.base_url + "/models").json()["data"]
    assert {m["id"]: m["context_window"] for m in listed} == upstream.models


def test_unknown_engine_or_tokenizer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        FakeUpstream(engine="tgi")  # type: ignore[arg-type]  # deliberately no engine
    with pytest.raises(ValueError, match="unknown tokenizer"):
        FakeUpstream(tokenizer="llama")  # type: ignore[arg-type]  # deliberately none


def test_standalone_takes_engine_and_tokenizer_flags() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.upstream", "--help"], capture_output=True, text=True
    )
    assert "--engine" in result.stdout and "--tokenizer" in result.stdout
    assert "--prefill" in result.stdout
    assert "llama-cpp-python" in result.stdout and "qwen" in result.stdout


# ---- the prefix cache, as each engine reports it ---------------------------------------------

LONG = "The quick brown fox jumps over the lazy dog near the riverbank. " * 100
"""About 1,300 tokens: OpenAI caches only prompts of 1,024 and more."""


def turns(*texts: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": LONG}]
    for text in texts[:-1]:
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": "Ok."}]
    return [*messages, {"role": "user", "content": texts[-1]}]


def test_the_cl100k_prompt_is_as_long_as_openai_counts(upstream: FakeUpstream) -> None:
    """The tokens the prefix cache compares are the ones usage charges."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi", "name": "bob"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    ]
    for some, schemas in ((messages[:1], None), (messages, None), (messages, tools)):
        assert len(upstream.tokenize_chat(some, schemas)) == count_chat_tokens(some, schemas)


def answer(up: FakeUpstream, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = {"model": "large", "messages": messages, **extra}
    return httpx.post(up.base_url + "/chat/completions", json=body).json()


def streamed(up: FakeUpstream, messages: list[dict[str, Any]], usage: bool) -> list[Any]:
    body: dict[str, Any] = {"model": "large", "messages": messages, "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    with httpx.stream("POST", up.base_url + "/chat/completions", json=body) as response:
        return [
            json.loads(line[6:])
            for line in response.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("engine", ENGINES)
def test_cached_tokens_come_in_the_engines_own_shape(
    engine: Engine, stream: bool, upstream: FakeUpstream
) -> None:
    """OpenAI: prompt_tokens_details always, 0 included. vLLM: only when not 0 (null in a
    whole answer, left out of a stream). llama.cpp: `timings` with cache_n and prompt_n,
    on a stream's last chunk. The others: nothing."""
    upstream.set_engine(engine)
    first, second = turns("one"), turns("one", "two")
    results = []
    for messages in (first, second):
        if not stream:
            results.append(answer(upstream, messages))
            continue
        events = streamed(upstream, messages, usage=True)
        assert all("timings" not in e for e in events[:-1])
        results.append(events[-1])
    (cold, warm), log = results, upstream.cache_log
    assert [r.prompt_tokens for r in log] == [
        upstream.count_chat(first),
        upstream.count_chat(second),
    ]
    assert log[0].cached_tokens == 0 and log[1].cached_tokens > 1000
    if engine == "llama-cpp-python" and stream:
        assert "usage" not in cold and "usage" not in warm
        return
    for result, record in zip((cold, warm), log, strict=True):
        usage: dict[str, Any] = result["usage"]
        timings: Any = result.get("timings")
        assert usage["prompt_tokens"] == record.prompt_tokens
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if engine == "openai":
            assert cached == record.cached_tokens and "completion_tokens_details" in usage
        elif engine == "vllm":
            assert cached == (record.cached_tokens or None)
            assert ("prompt_tokens_details" in usage) is (not stream or bool(cached))
        else:
            assert "prompt_tokens_details" not in usage
        if engine != "llamacpp":
            assert timings is None
            continue
        assert (timings["cache_n"], timings["prompt_n"]) == (
            record.cached_tokens,
            record.prompt_tokens - record.cached_tokens,
        )
        assert timings["predicted_n"] == usage["completion_tokens"]
        assert {"prompt_ms", "prompt_per_second", "predicted_ms", "predicted_per_second"} <= set(
            timings
        )


def test_llamacpp_times_a_stream_without_usage_on_its_finish_chunk(
    upstream: FakeUpstream,
) -> None:
    upstream.set_engine("llamacpp")
    upstream.set_prefill(0.0001)
    events = streamed(upstream, turns("one"), usage=False)
    last = events[-1]
    assert last["choices"][0]["finish_reason"] == "stop" and "usage" not in last
    prompt = upstream.count_chat(turns("one"))
    assert last["timings"]["cache_n"] == 0 and last["timings"]["prompt_n"] == prompt
    assert last["timings"]["prompt_ms"] == pytest.approx(prompt * 0.1)
    assert all("timings" not in e for e in events[:-1])


def test_vllm_reports_no_cached_tokens_unless_enabled(upstream: FakeUpstream) -> None:
    upstream.set_engine("vllm")
    upstream.enable_prompt_tokens_details = False
    answer(upstream, turns("one"))
    assert answer(upstream, turns("one", "two"))["usage"]["prompt_tokens_details"] is None
    assert "prompt_tokens_details" not in streamed(upstream, turns("one", "two"), True)[-1]["usage"]
    assert upstream.cache_log[-1].cached_tokens > 1000, "it caches all the same"


def test_completions_share_the_cache_and_reset_empties_it(upstream: FakeUpstream) -> None:
    upstream.set_engine("llamacpp")
    for _ in range(2):
        body = {"model": "large", "prompt": LONG}
        result = httpx.post(upstream.base_url + "/completions", json=body).json()
    assert result["timings"]["cache_n"] == upstream.count(LONG) - 1
    assert [r.cached_tokens for r in upstream.cache_log] == [0, upstream.count(LONG) - 1]
    upstream.reset()
    assert upstream.cache_log == []
    upstream.set_engine("llamacpp")
    body = {"model": "large", "prompt": LONG}
    result = httpx.post(upstream.base_url + "/completions", json=body).json()
    assert result["timings"]["cache_n"] == 0


# ---- the official SDK reads the fake's wire ----------------------------------------------------


def sdk_turns(*texts: str) -> list[ChatCompletionMessageParam]:
    return cast(list[ChatCompletionMessageParam], turns(*texts))


@pytest.fixture
def sdk(upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=upstream.base_url, api_key="sk-fake", max_retries=0)
    yield client
    client.close()


@pytest.mark.parametrize("engine", ["openai", "vllm"])
def test_the_openai_sdk_reads_cached_tokens(
    engine: Engine, upstream: FakeUpstream, sdk: openai.OpenAI
) -> None:
    upstream.set_engine(engine)
    first = sdk.chat.completions.create(model="large", messages=sdk_turns("one"))
    assert first.usage is not None
    details = first.usage.prompt_tokens_details
    assert (details.cached_tokens if details else None) == (0 if engine == "openai" else None)
    second = sdk.chat.completions.create(model="large", messages=sdk_turns("one", "two"))
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details.cached_tokens == upstream.cache_log[-1].cached_tokens
    chunks = list(
        sdk.chat.completions.create(
            model="large",
            messages=sdk_turns("one", "two"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == upstream.cache_log[-1].cached_tokens > 1000


def test_the_openai_sdk_keeps_llamacpp_timings(upstream: FakeUpstream, sdk: openai.OpenAI) -> None:
    upstream.set_engine("llamacpp")
    sdk.chat.completions.create(model="large", messages=sdk_turns("one"))
    whole = sdk.chat.completions.create(model="large", messages=sdk_turns("one", "two"))
    assert whole.model_extra is not None
    assert whole.model_extra["timings"]["cache_n"] == upstream.cache_log[-1].cached_tokens > 1000
    chunks = list(
        sdk.chat.completions.create(
            model="large",
            messages=sdk_turns("one", "two"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    assert last.model_extra is not None and last.usage is not None
    timings = last.model_extra["timings"]
    assert timings["cache_n"] + timings["prompt_n"] == last.usage.prompt_tokens
