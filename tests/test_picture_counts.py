"""The typed text of a message with pictures counted by the serving model's tokenizer,
its pictures by the provider's rule (docs/design.md section 12): against the fake engine counting
with Qwen's vocabulary over real HTTP, on SQLite and PostgreSQL. The fit of a message
with a picture is its text's exact count, plus the picture's rule, plus the template
overhead; and a prompt that carries a picture teaches neither the per-message overhead
nor the calibration factor (the provider's count of a picture is its own)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlmodel import col, select

from tests.catalogs import engine_provider_toml
from tests.dbutil import session_on
from tests.factories import api_client, settings_on
from tests.factories.files import picture
from tests.test_message_files import send, uploaded
from tests.upstream import FakeUpstream
from webapp.chat.stored.models import Message
from webapp.db import Database
from webapp.llm.calibration import DEFAULT_OVERHEAD, CallerCalibration, ModelCalibration
from webapp.llm.estimator import REPLY_PRIMING
from webapp.llm.images import image_tokens
from webapp.llm.manager import carries_pictures, countable_text

EYE = """
[[models]]
name = "eye"
provider = "engine"
model_id = "medium"
context_window = 8192
max_output_tokens = 200
capabilities = ["chat", "vision"]

[[configurations]]
name = "eye"
model = "eye"
trim_to = 1.0
"""

TOKENIZER = "server:eye"
TYPED = "Что на снимке? 清水寺 at dawn, or Fushimi Inari 🦊 — say which, with reasons."
PHOTO = (64, 48)
RULE = image_tokens("openai", *PHOTO)  # the engine's provider is OpenAI-shaped: 85 + 170


@pytest.fixture
async def eye_client(
    database_url: str, tmp_path: Path, engine_upstream: FakeUpstream
) -> AsyncIterator[AsyncTestClient]:
    """alice's client of the app on a model that sees, served by the fake engine (whose
    tokenizer the app probes at start and counts with)."""
    engine_upstream.set_engine("llamacpp")
    path = tmp_path / "eye.toml"
    path.write_text(engine_provider_toml(engine_upstream) + EYE, encoding="utf-8")
    async with api_client(settings_on(database_url, path)) as client:
        yield client


async def rows(database_url: str, conversation: str) -> list[Message]:
    async with session_on(Database(database_url)) as session:
        mine = select(Message).where(Message.conversation_id == conversation)
        found = await session.exec(mine.order_by(col(Message.seq)))
        return list(found.all())


async def learned(database_url: str) -> list[tuple[Any, ...]]:
    """Every stored calibration figure of the model "eye": the model's shared row and
    each caller's own."""
    async with session_on(Database(database_url)) as session:
        shared = await session.exec(select(ModelCalibration).where(ModelCalibration.model == "eye"))
        own = await session.exec(select(CallerCalibration).where(CallerCalibration.model == "eye"))
        return [(r.factor, r.samples, r.message_overhead) for r in shared.all()] + [
            (r.caller, r.factor, r.message_overhead) for r in own.all()
        ]


async def conversation_on(client: AsyncTestClient) -> str:
    made = await client.post("/api/conversations", json={"configuration": "eye"})
    assert made.status_code == 201, made.text
    conversation: str = made.json()["id"]
    return conversation


async def test_a_picture_messages_text_is_counted_by_the_tokenizer_and_its_picture_by_the_rule(
    eye_client: AsyncTestClient, engine_upstream: FakeUpstream, database_url: str
) -> None:
    client, up = eye_client, engine_upstream
    photo = await uploaded(client, "kyoto.png", picture(PHOTO))
    conversation = await conversation_on(client)
    sent = await send(client, conversation, content=TYPED, files=[photo])
    assert sent.status_code == 201, sent.text
    user = sent.json()["user"]
    typed = up.count(TYPED)
    assert typed < len(TYPED) // 2 < user["estimated_tokens"]  # not the estimate's figure
    # The row keeps the text's count, as for a message without pictures.
    (question, answer) = await rows(database_url, conversation)
    assert question.token_counts == {TOKENIZER: typed}
    assert user["token_counts"][TOKENIZER] == typed
    assert user["attachments"][0]["token_counts"] == {"eye": RULE}
    # The fit: text count + the picture's rule + the template overhead (+ the priming).
    assert user["fit"]["counted_by"] == TOKENIZER  # every message counted, none estimated
    assert user["fit"]["estimated_tokens"] == typed + RULE + DEFAULT_OVERHEAD + REPLY_PRIMING

    # The next send carries the picture's turn as history: counted the same way.
    follow = "And at dusk?"
    again = await send(client, conversation, content=follow)
    assert again.status_code == 201, again.text
    fit = again.json()["user"]["fit"]
    assert fit["counted_by"] == TOKENIZER and fit["left_out"] == []
    assert answer.token_counts == {TOKENIZER: up.count(answer.content)}
    assert (
        fit["estimated_tokens"]
        == ((typed + RULE) + up.count(answer.content) + up.count(follow))
        + 3 * DEFAULT_OVERHEAD
        + REPLY_PRIMING
    )
    last = [r for r in up.requests if r["path"].endswith("/chat/completions")][-1]
    sent_parts = last["body"]["messages"][0]["content"]
    assert [p["type"] for p in sent_parts] == ["text", "image_url"]


async def test_a_send_with_a_picture_teaches_neither_the_overhead_nor_the_factor(
    eye_client: AsyncTestClient, engine_upstream: FakeUpstream, database_url: str
) -> None:
    client, up = eye_client, engine_upstream
    conversation = await conversation_on(client)
    first = await send(client, conversation, content="Hello there, a plain question first.")
    assert first.status_code == 201, first.text
    taught = await learned(database_url)
    assert taught, "a text-only send teaches the factor and the overhead"

    photo = await uploaded(client, "kyoto.png", picture(PHOTO))
    other = await conversation_on(client)
    sends: list[tuple[str, dict[str, Any]]] = [
        (other, {"content": TYPED, "files": [photo]}),  # a picture in the new message
        (other, {"content": "And at dusk?"}),  # a picture in the history it sends
        (conversation, {"content": "Now this one", "files": [photo]}),  # beside counted text
    ]
    for where, body in sends:
        sent = await send(client, where, **body)
        assert sent.status_code == 201, sent.text
        assert sent.json()["user"]["fit"]["counted_by"] == TOKENIZER
        assert await learned(database_url) == taught, body
    usage = [r for r in up.requests if r["path"].endswith("/chat/completions")]
    assert len(usage) == 4  # every send was answered (and reported its usage)

    plain = await send(client, await conversation_on(client), content="A plain one again.")
    assert plain.status_code == 201, plain.text
    assert await learned(database_url) != taught  # a text-only send still teaches


def test_the_tokenizer_counts_a_picture_messages_one_text_part_and_nothing_else() -> None:
    image = {"type": "image_url", "image_url": {"url": "webapp-file:abc"}}
    text = {"type": "text", "text": TYPED}
    assert countable_text({"role": "user", "content": [text, image]}) == TYPED
    assert countable_text({"role": "user", "content": [image]}) == ""
    assert carries_pictures([{"role": "user", "content": [text, image]}])
    assert not carries_pictures([{"role": "user", "content": [text]}, {"role": "assistant"}])
    # Several text parts (joined as the provider chooses) or another kind of part: the
    # estimate sizes the message, and the tokenizer is not asked.
    assert countable_text({"role": "user", "content": [text, image, text]}) is None
    audio = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    assert countable_text({"role": "user", "content": [text, audio]}) is None
