"""The gateway in front of a Claude and a Gemini model: an OpenAI client calling
`/v1/chat/completions` gets OpenAI shapes back, streamed or not, tool calls included, and
`/v1/embeddings` Gemini's vectors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.factories import settings_on
from tests.served import Gateway, gateway_on
from tests.vendors import FakeVendors, providers_toml
from webapp.llm.providers.base import is_image_refusal

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


MODELS = """
[[models]]
name = "claude-small"
provider = "claude"
model_id = "claude-small"
capabilities = ["chat", "tools"]

[[models]]
name = "gemini-small"
provider = "google"
model_id = "gemini-small"
capabilities = ["chat", "tools"]

[[models]]
name = "gemini-embedding"
provider = "google"
model_id = "gemini-embedding"
capabilities = ["embedding"]

[[models]]
name = "claude-large"
provider = "claude"
model_id = "claude-large"
capabilities = ["chat", "vision"]

[[configurations]]
name = "claude"
model = "claude-small"

[[configurations]]
name = "claude-vision"
model = "claude-large"

[[models]]
name = "claude-said-seeing"
provider = "claude"
model_id = "claude-small"
capabilities = ["chat", "vision"]

[[configurations]]
name = "claude-wrongly-seeing"
model = "claude-said-seeing"

[[configurations]]
name = "gemini-embed"
model = "gemini-embedding"

[[configurations]]
name = "gemini"
model = "gemini-small"
"""


@pytest.fixture
def gateway(
    vendors: FakeVendors, vendor_keys: None, tmp_path: Path, sqlite_url: str
) -> Iterator[Gateway]:
    catalog = tmp_path / "native.toml"
    catalog.write_text(providers_toml(vendors) + MODELS, encoding="utf-8")
    with gateway_on(settings_on(sqlite_url, catalog)) as gateway:
        yield gateway


@pytest.mark.parametrize("configuration", ["claude", "gemini"])
def test_openai_clients_get_openai_shapes_from_claude_and_gemini(
    gateway: Gateway, configuration: str
) -> None:
    client = gateway.client()
    question = [{"role": "user", "content": "Weather in Oslo?"}]
    answer = client.chat.completions.create(
        model=configuration, messages=[{"role": "user", "content": "Hello"}], max_tokens=50
    )
    assert answer.choices[0].message.content
    assert answer.choices[0].message.content.startswith("Echo from")
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.prompt_tokens > 0
    pieces = client.chat.completions.create(
        model=configuration,
        messages=[{"role": "user", "content": "Stream it"}],
        max_tokens=50,
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in pieces if chunk.choices)
    assert text.startswith("Echo from")
    call = client.chat.completions.create(
        model=configuration,
        messages=question,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        max_tokens=50,
    )
    [tool_call] = call.choices[0].message.tool_calls or []
    assert call.choices[0].finish_reason == "tool_calls"
    assert tool_call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(tool_call.function.arguments) == {"city": "echo"}  # type: ignore[union-attr]


def test_openai_clients_get_gemini_embeddings(gateway: Gateway) -> None:
    answer = gateway.client().embeddings.create(
        model="gemini-embed", input=["Hello, world!", "नमस्ते", "Hello, world!"]
    )
    vectors = [item.embedding for item in answer.data]
    assert len(vectors) == 3 and vectors[0] == vectors[2] != vectors[1]
    assert [item.index for item in answer.data] == [0, 1, 2]


PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
    "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_a_model_that_refuses_an_image_is_a_400_naming_it(gateway: Gateway) -> None:
    """The attack: an image sent to a Claude model that reads none came back as a 502, the
    gateway's upstream failing; it is the caller's request to change, named by model."""
    client = gateway.client()
    looking: list[Any] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": PIXEL}},
            ],
        }
    ]
    # The catalog says the model cannot see: refused before any call.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="claude", messages=looking, max_tokens=50)
    assert refused.value.status_code == 400
    assert refused.value.code == "image_not_supported"
    assert "claude-small cannot read pictures" in refused.value.message
    assert "claude-vision" in refused.value.message, "it names the configurations that can"
    # The catalog wrongly says it can: the vendor's refusal is the same 400.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="claude-wrongly-seeing", messages=looking, max_tokens=50
        )
    assert refused.value.status_code == 400
    assert refused.value.code == "image_not_supported"
    assert "claude-said-seeing does not accept images" in refused.value.message
    seen = client.chat.completions.create(model="claude-vision", messages=looking, max_tokens=50)
    assert seen.choices[0].message.content


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        ("'claude-3-5-haiku' does not support image input.", True),
        ("Qwen/Qwen2.5-7B-Instruct is not a multimodal model", True),
        ("Invalid content type. image_url is only supported by certain models.", True),
        ("This model doesn't support images", True),
        ("prompt is too long: 5000 tokens > 4096 maximum", False),
        ("max_tokens: Field required", False),
    ],
)
def test_each_vendors_words_for_refusing_images_are_read(message: str, refused: bool) -> None:
    assert is_image_refusal(message) is refused
