"""Pictures through the /v1 gateway made ready as the chat's are (docs/design.md section 12),
against the fake upstream over HTTP on SQLite and PostgreSQL: scaled to the provider's
largest, stripped of their EXIF (a GPS position), counted at the size sent, read off the
event loop; a picture that lies about itself, a decompression bomb or an SVG is OpenAI's
400 naming the part, and nothing reaches the provider."""

from __future__ import annotations

import base64
from io import BytesIO
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from PIL import Image

from tests.catalogs import SEEING
from tests.factories.files import GPS_IFD, pdf, picture, png_claiming
from tests.looplag import watching_app
from tests.upstream import FakeUpstream
from webapp.llm.images import image_tokens

pytestmark = pytest.mark.settings(extra=SEEING)

STALL = 0.1


def asking(url: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Where was this taken?"},
                {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
            ],
        }
    ]


def data_url(data: bytes, media_type: str = "image/jpeg") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode("ascii")


def chats(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [r for r in upstream.requests if r["path"].endswith("/chat/completions")]


async def test_a_large_photo_is_scaled_stripped_and_counted_as_sent_off_the_loop(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    photo = picture((3000, 2000), kind="JPEG", gps=True)
    assert Image.open(BytesIO(photo)).getexif().get_ifd(GPS_IFD)  # it does say where
    with watching_app(client) as lag:
        answered = await client.post(
            "/v1/chat/completions", json={"model": "seeing", "messages": asking(data_url(photo))}
        )
    assert answered.status_code == 200, answered.text
    assert lag.ticks > 0 and lag.busiest < STALL, f"the loop stalled {lag.busiest:.3f} s"
    part = chats(upstream)[-1]["body"]["messages"][-1]["content"][1]
    assert part["image_url"]["detail"] == "high"  # the part's other fields kept
    url = part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    sent = Image.open(BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert sent.size == (2048, 1365)  # OpenAI's long edge, as the chat's pictures
    assert not sent.getexif()  # no camera, no GPS position

    plain = [{"role": "user", "content": [{"type": "text", "text": "Where was this taken?"}]}]
    without = await client.post("/v1/chat/completions", json={"model": "seeing", "messages": plain})
    picture_cost = (
        answered.json()["webapp"]["estimated_tokens"] - without.json()["webapp"]["estimated_tokens"]
    )
    # Counted at the size sent by the costliest rule of the models that see (OpenAI's
    # tiles beat seer-local's fixed 300); the model's calibration may round up by one.
    expected = image_tokens("openai", 2048, 1365)
    assert expected > 300 and expected <= picture_cost <= expected + 2


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (data_url(b'<svg xmlns="http://www.w3.org/2000/svg"></svg>', "image/svg+xml"), "SVG"),
        (data_url(pdf(["not a picture"]), "image/png"), "not a PNG, JPEG"),
        (data_url(png_claiming(100_000, 100_000), "image/png"), "pixels"),
        ("data:image/png;base64,@@not base64@@", "base64"),
        (data_url(b"\x89PNG\r\n\x1a\nbroken", "image/png"), "not a picture that can be read"),
    ],
    ids=["svg", "lying-type", "bomb", "not-base64", "broken"],
)
async def test_a_bad_picture_is_openais_400_naming_the_part_and_nothing_is_sent(
    client: AsyncTestClient, upstream: FakeUpstream, url: str, said: str
) -> None:
    refused = await client.post(
        "/v1/chat/completions", json={"model": "seeing", "messages": asking(url)}
    )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_image" and error["param"] == "messages[0].content[1]"
    assert said in error["message"], error
    assert chats(upstream) == []
