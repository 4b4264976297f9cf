"""Pictures and documents on the wire (docs/design.md section 12): the fakes take the parts the
vendors' official SDKs build (`anthropic`'s `image` and `document` blocks, `google-genai`'s
`inlineData` part, `openai`'s `image_url` part), and the app's providers send a picture
exactly as the SDK would."""

from __future__ import annotations

import base64
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from tests.factories.files import pdf, picture
from tests.upstream import FakeUpstream
from tests.vendors import ANTHROPIC_KEY, GEMINI_KEY, FakeVendors
from webapp.llm.providers.anthropic import AnthropicProvider
from webapp.llm.providers.gemini import GeminiProvider
from webapp.llm.providers.http import HTTPProvider

PNG = picture((32, 24))
PNG_BASE64 = base64.b64encode(PNG).decode("ascii")
SEEN: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_BASE64}"}},
        ],
    }
]


def sdk_anthropic_image(vendors: FakeVendors) -> dict[str, Any]:
    with anthropic.Anthropic(
        api_key=ANTHROPIC_KEY, base_url=vendors.base_url, max_retries=0
    ) as claude:
        document = base64.b64encode(pdf(["Okapi"])).decode("ascii")
        answer = claude.messages.create(
            model="claude-large",
            max_tokens=100,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": PNG_BASE64,
                            },
                        },
                        {
                            "type": "document",
                            "source": {
                                "type": "base64",
                                "media_type": "application/pdf",
                                "data": document,
                            },
                        },
                    ],
                }
            ],
        )
    assert isinstance(answer.content[0], anthropic.types.TextBlock)
    blocks: list[dict[str, Any]] = vendors.requests[-1]["body"]["messages"][0]["content"]
    assert blocks[2]["type"] == "document"
    return blocks[1]


def sdk_gemini_picture(vendors: FakeVendors) -> dict[str, Any]:
    with genai.Client(
        api_key=GEMINI_KEY, http_options=genai_types.HttpOptions(base_url=vendors.base_url)
    ) as gemini:
        answer = gemini.models.generate_content(
            model="gemini-small",
            contents=[
                genai_types.Content(
                    role="user",
                    parts=[
                        genai_types.Part(text="What is this?"),
                        genai_types.Part.from_bytes(data=PNG, mime_type="image/png"),
                    ],
                )
            ],
        )
    assert answer.text
    part: dict[str, Any] = vendors.requests[-1]["body"]["contents"][0]["parts"][1]
    return part


def test_the_openai_fake_takes_an_image_url_part_as_the_sdk_builds_it(
    upstream: FakeUpstream,
) -> None:
    with openai.OpenAI(api_key="x", base_url=f"{upstream.base_url}", max_retries=0) as client:
        answer = client.chat.completions.create(model="small", messages=SEEN)  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    sent = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    assert sent["body"]["messages"] == SEEN


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
async def test_the_providers_send_a_picture_as_the_official_sdk_does(
    kind: str, vendors: FakeVendors
) -> None:
    llm: HTTPProvider
    if kind == "anthropic":
        expected = sdk_anthropic_image(vendors)
        llm = AnthropicProvider(vendors.base_url, api_key=ANTHROPIC_KEY, timeout=5)
        model = "claude-large"
    else:
        expected = sdk_gemini_picture(vendors)
        llm = GeminiProvider(vendors.base_url, api_key=GEMINI_KEY, timeout=5)
        model = "gemini-small"
    async with llm:
        answer = await llm.chat(model, SEEN, max_tokens=100)
    assert answer.content
    body = vendors.requests[-1]["body"]
    parts = body["messages"][0]["content"] if kind == "anthropic" else body["contents"][0]["parts"]
    assert [p for p in parts if p != expected and "text" not in p] == []
    assert expected in parts
