"""The fake upstream's engine modes behave like the real engines they stand for.

Other tests trust these behaviours (a quirk the fake lacks is a bug the app can ship),
so each is checked here on the wire.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest

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
    assert "llama-cpp-python" in result.stdout and "qwen" in result.stdout
