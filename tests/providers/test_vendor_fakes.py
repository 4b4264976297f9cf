"""The fake vendors are faithful: the official `anthropic` and `google-genai` SDKs,
pointed at `tests/vendors/`, parse every answer, stream, count, model record and error
into their own types, as they would the real APIs'. The app's providers are then tested
against the same fake (test_anthropic_provider.py, test_gemini_provider.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from tests.vendors import ANTHROPIC_KEY, GEMINI_KEY, FakeVendors

WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def claude(vendors: FakeVendors) -> Iterator[anthropic.Anthropic]:
    """Closed at the end: a client left to the garbage collector (one an error's traceback
    holds in a cycle) may have its sockets finalized first, each a ResourceWarning."""
    with anthropic.Anthropic(
        api_key=ANTHROPIC_KEY, base_url=vendors.base_url, max_retries=0
    ) as client:
        yield client


@pytest.fixture
def gemini(vendors: FakeVendors) -> Iterator[genai.Client]:
    """Closed at the end, as `claude` is."""
    with genai.Client(
        api_key=GEMINI_KEY,
        http_options=genai_types.HttpOptions(base_url=vendors.base_url),
    ) as client:
        yield client


# ---- Anthropic --------------------------------------------------------------------------


def test_anthropic_sdk_reads_a_message_with_its_usage(
    vendors: FakeVendors, claude: anthropic.Anthropic
) -> None:
    message = claude.messages.create(
        model="claude-small",
        max_tokens=200,
        system="You are terse.",
        messages=[{"role": "user", "content": "Hello there"}],
    )
    assert isinstance(message, anthropic.types.Message)
    assert message.stop_reason == "end_turn"
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    assert block.text.startswith("Echo from claude-small")
    counted = claude.messages.count_tokens(
        model="claude-small",
        system="You are terse.",
        messages=[{"role": "user", "content": "Hello there"}],
    )
    assert isinstance(counted, anthropic.types.MessageTokensCount)
    assert message.usage.input_tokens == counted.input_tokens > 0
    assert message.usage.output_tokens == vendors.count(block.text)
    headers = vendors.requests[0]["headers"]
    assert headers["anthropic-version"]
    assert ANTHROPIC_KEY in (headers.get("x-api-key", "") + headers.get("authorization", ""))


def test_anthropic_sdk_accumulates_a_stream(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="claude-small", max_tokens=200, messages=[{"role": "user", "content": "Stream it"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 3
    assert "".join(pieces) == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 1
    assert final.usage.input_tokens > 0


def test_anthropic_sdk_streams_a_tool_call_and_sends_its_result(
    claude: anthropic.Anthropic,
) -> None:
    question: Any = {"role": "user", "content": "Weather in Oslo?"}
    with claude.messages.stream(
        model="claude-small", max_tokens=200, tools=[WEATHER_TOOL], messages=[question]
    ) as stream:
        final = stream.get_final_message()
    call = final.content[0]
    assert isinstance(call, anthropic.types.ToolUseBlock)
    assert final.stop_reason == "tool_use" and call.input == {"city": "echo"}
    conversation: Any = [
        question,
        {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny"}],
        },
    ]
    answer = claude.messages.create(
        model="claude-small", max_tokens=200, tools=[WEATHER_TOOL], messages=conversation
    )
    assert answer.stop_reason == "end_turn"


def test_anthropic_sdk_raises_the_typed_errors(
    vendors: FakeVendors, claude: anthropic.Anthropic
) -> None:
    hello = [{"role": "user", "content": "Hi"}]
    vendors.fail_next(529)
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        claude.messages.create(model="claude-small", max_tokens=10, messages=hello)  # type: ignore[arg-type]
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    vendors.fail_next(429, retry_after=7)
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(model="claude-small", max_tokens=10, messages=hello)  # type: ignore[arg-type]
    assert limited.value.response.headers["retry-after"] == "7"
    with pytest.raises(anthropic.BadRequestError) as too_long:
        claude.messages.create(
            model="claude-small",
            max_tokens=10,
            messages=[{"role": "user", "content": "word " * 5000}],
        )
    assert "prompt is too long" in too_long.value.message
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-nope", max_tokens=10, messages=hello)  # type: ignore[arg-type]
    with (
        anthropic.Anthropic(api_key="wrong", base_url=vendors.base_url, max_retries=0) as wrong,
        pytest.raises(anthropic.AuthenticationError),
    ):
        wrong.models.list()


def test_anthropic_sdk_reports_an_error_event_mid_stream(
    vendors: FakeVendors, claude: anthropic.Anthropic
) -> None:
    vendors.break_stream_after(2)
    hello: Any = [{"role": "user", "content": "Hi"}]
    with (
        pytest.raises(anthropic.APIStatusError) as broken,
        claude.messages.stream(model="claude-small", max_tokens=200, messages=hello) as stream,
    ):
        list(stream.text_stream)
    assert "Overloaded" in str(broken.value)


def test_anthropic_sdk_reads_model_records(claude: anthropic.Anthropic) -> None:
    record = claude.models.retrieve("claude-small")
    assert isinstance(record, anthropic.types.ModelInfo)
    assert (record.max_input_tokens, record.max_tokens) == (4096, 1024)
    assert [m.id for m in claude.models.list()] == ["claude-small", "claude-large"]


def test_anthropic_sdk_sees_cache_reads_after_a_breakpoint(
    vendors: FakeVendors, claude: anthropic.Anthropic
) -> None:
    vendors.min_cacheable = 50
    system = [{"type": "text", "text": "Rules. " * 80, "cache_control": {"type": "ephemeral"}}]
    first = claude.messages.create(
        model="claude-small",
        max_tokens=50,
        system=system,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "One"}],
    )
    second = claude.messages.create(
        model="claude-small",
        max_tokens=50,
        system=system,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Two"}],
    )
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    total = (
        second.usage.input_tokens
        + second.usage.cache_read_input_tokens
        + (second.usage.cache_creation_input_tokens or 0)
    )
    assert total == first.usage.input_tokens + first.usage.cache_creation_input_tokens


# ---- Gemini -----------------------------------------------------------------------------


def test_gemini_sdk_reads_an_answer_and_its_usage(
    vendors: FakeVendors, gemini: genai.Client
) -> None:
    config = genai_types.GenerateContentConfig(
        system_instruction="You are terse.", max_output_tokens=200
    )
    answer = gemini.models.generate_content(
        model="gemini-small", contents="Hello there", config=config
    )
    assert isinstance(answer, genai_types.GenerateContentResponse)
    assert answer.text is not None and answer.text.startswith("Echo from gemini-small")
    assert answer.candidates and answer.candidates[0].finish_reason == genai_types.FinishReason.STOP
    counted = gemini.models.count_tokens(model="gemini-small", contents="Hello there")
    assert counted.total_tokens and counted.total_tokens > 0
    usage = answer.usage_metadata
    assert usage is not None and usage.prompt_token_count and usage.candidates_token_count
    assert vendors.requests[0]["headers"].get("x-goog-api-key") == GEMINI_KEY


def test_gemini_sdk_streams(gemini: genai.Client) -> None:
    chunks = list(gemini.models.generate_content_stream(model="gemini-small", contents="Stream it"))
    assert len(chunks) >= 3
    assert "".join(c.text or "" for c in chunks).startswith("Echo from gemini-small")
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == genai_types.FinishReason.STOP
    assert last.usage_metadata and last.usage_metadata.candidates_token_count


def test_gemini_sdk_calls_a_function_and_sends_its_response(gemini: genai.Client) -> None:
    declaration = genai_types.FunctionDeclaration(
        name="get_weather",
        description="The weather in a city.",
        parameters_json_schema=WEATHER_TOOL["input_schema"],
    )
    config = genai_types.GenerateContentConfig(
        tools=[genai_types.Tool(function_declarations=[declaration])],
        automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True),
    )
    answer = gemini.models.generate_content(
        model="gemini-small", contents="Weather in Oslo?", config=config
    )
    assert answer.function_calls and answer.function_calls[0].name == "get_weather"
    assert answer.function_calls[0].args == {"city": "echo"}
    reply = answer.candidates[0].content  # type: ignore[index]
    assert reply is not None
    # Typed as one list type: with Pillow installed the SDK's `contents` also takes
    # pictures, and a list of mixed items matches none of its list types.
    contents: list[genai_types.Content] = [
        genai_types.Content(role="user", parts=[genai_types.Part(text="Weather in Oslo?")]),
        reply,
        genai_types.Content(
            role="user",
            parts=[
                genai_types.Part.from_function_response(
                    name="get_weather", response={"result": "Sunny"}
                )
            ],
        ),
    ]
    final = gemini.models.generate_content(
        model="gemini-small",
        contents=contents,
        config=config,
    )
    assert final.text and final.text.startswith("Echo from gemini-small")


def test_gemini_sdk_raises_the_typed_errors(vendors: FakeVendors, gemini: genai.Client) -> None:
    vendors.fail_next(429, retry_after=7)
    with pytest.raises(genai_errors.ClientError) as limited:
        gemini.models.generate_content(model="gemini-small", contents="Hi")
    assert limited.value.code == 429 and limited.value.status == "RESOURCE_EXHAUSTED"
    vendors.fail_next(503)
    with pytest.raises(genai_errors.ServerError) as unavailable:
        gemini.models.generate_content(model="gemini-small", contents="Hi")
    assert unavailable.value.status == "UNAVAILABLE"
    with pytest.raises(genai_errors.ClientError) as too_long:
        gemini.models.generate_content(model="gemini-small", contents="word " * 5000)
    assert too_long.value.status == "INVALID_ARGUMENT"
    assert "exceeds the maximum number of tokens allowed (4096)" in str(too_long.value.message)


def test_gemini_sdk_reads_model_records(gemini: genai.Client) -> None:
    record = gemini.models.get(model="gemini-small")
    assert (record.input_token_limit, record.output_token_limit) == (4096, 1024)
    assert record.name == "models/gemini-small"


def test_gemini_reports_implicitly_cached_prefixes(
    vendors: FakeVendors, gemini: genai.Client
) -> None:
    vendors.min_cacheable = 50
    config = genai_types.GenerateContentConfig(system_instruction="Rules. " * 80)
    gemini.models.generate_content(model="gemini-small", contents="One", config=config)
    again = gemini.models.generate_content(model="gemini-small", contents="Two", config=config)
    usage = again.usage_metadata
    assert usage and usage.cached_content_token_count and usage.prompt_token_count
    assert 50 <= usage.cached_content_token_count < usage.prompt_token_count


def test_gemini_sdk_embeds_a_batch(vendors: FakeVendors, gemini: genai.Client) -> None:
    texts = ["Hello, world!", "नमस्ते दुनिया", "Hello, world!"]
    answer = gemini.models.embed_content(
        model="gemini-embedding",
        contents=[genai_types.Content(parts=[genai_types.Part(text=t)]) for t in texts],
        config=genai_types.EmbedContentConfig(output_dimensionality=4),
    )
    vectors = [e.values for e in answer.embeddings or []]
    assert len(vectors) == 3 and all(v is not None and len(v) == 4 for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    [request] = [r for r in vendors.requests if r["path"].endswith(":batchEmbedContents")]
    assert len(request["body"]["requests"]) == 3
    with pytest.raises(genai_errors.ClientError) as refused:
        gemini.models.embed_content(model="gemini-small", contents="not an embedder")
    assert refused.value.code == 404
