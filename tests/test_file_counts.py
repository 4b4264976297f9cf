"""A text file's and a PDF's tokens counted with the serving model's own tokenizer, as
typed text is (docs/design.md sections 7 and 12): against the fake engine counting with Qwen's
vocabulary over real HTTP, on SQLite and PostgreSQL. The chip, the send's attachments
and the size check read one count per file and tokenizer, made once and kept on the
file's row; until a tokenizer has counted a file, its estimate (which errs high) sizes
it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient
from sqlmodel import select

from tests.catalogs import engine_toml
from tests.counting import corpus
from tests.dbutil import session_on
from tests.factories import api_client, settings_on
from tests.factories.files import pdf
from tests.test_message_files import send, uploaded
from tests.upstream import FakeUpstream
from webapp.chat.files.models import StoredFile
from webapp.chat.sending.file_counts import as_read
from webapp.db import Database
from webapp.llm.estimator import estimate_text

NOTES = (
    "# Поездка в Киото\n\n"
    "- 清水寺 at dawn, then Fushimi Inari 🦊🦊\n"
    '- budget: {"hotel": 18000, "trains": 4200, "food": null}\n'
    "```python\nprint(sum(x**2 for x in range(10)))\n```\n"
)


@pytest.fixture
async def engine_client(
    database_url: str, tmp_path: Path, engine_upstream: FakeUpstream
) -> AsyncIterator[AsyncTestClient]:
    """alice's client of the app on the engine's catalog, its tokenizers probed at start."""
    engine_upstream.set_engine("llamacpp")
    path = tmp_path / "engine.toml"
    path.write_text(engine_toml(engine_upstream), encoding="utf-8")
    settings = settings_on(database_url, path)
    async with api_client(settings) as client:
        yield client


def tokenizes(upstream: FakeUpstream) -> int:
    return sum(r["path"] == "/tokenize" for r in upstream.requests)


def chip_tokens(html: str) -> int:
    match = re.search(r"· ([\d,]+) tokens", html)
    assert match, html
    return int(match.group(1).replace(",", ""))


async def stored_file(database_url: str, file_id: str) -> StoredFile:
    async with session_on(Database(database_url)) as session:
        found: StoredFile = (
            await session.exec(select(StoredFile).where(StoredFile.id == file_id))
        ).one()
        return found


async def file_counts(database_url: str, file_id: str) -> dict[str, int] | None:
    return (await stored_file(database_url, file_id)).token_counts


async def test_a_text_file_and_a_pdf_are_counted_once_by_the_models_tokenizer(
    engine_client: AsyncTestClient, engine_upstream: FakeUpstream, database_url: str
) -> None:
    client, up = engine_client, engine_upstream
    notes = await uploaded(client, "kyoto.md", NOTES.encode())
    report = await uploaded(client, "report.pdf", pdf(["Quarterly okapi figures: 12,400"]))
    made = await client.post("/api/conversations", json={"configuration": "gemma"})
    conversation = made.json()["id"]

    chip = await client.get(f"/c/{conversation}/files/{notes}/chip")
    assert chip.status_code == 200, chip.text
    stored = await stored_file(database_url, notes)
    exact = up.count(as_read(stored))
    assert chip_tokens(chip.text) == exact  # the engine's count, not the estimate
    assert await file_counts(database_url, notes) == {"server:gemma": exact}

    before = tokenizes(up)
    sent = await send(client, conversation, content="Plan it", files=[notes, report])
    assert sent.status_code == 201, sent.text
    counts = {a["name"]: a["token_counts"] for a in sent.json()["user"]["attachments"]}
    assert counts["kyoto.md"] == {"gemma": exact}
    report_counts = await file_counts(database_url, report)
    assert report_counts is not None and counts["report.pdf"] == {
        "gemma": report_counts["server:gemma"]
    }
    # The PDF's text (not yet counted) and the message: the notes were counted by the
    # chip and are not counted again; the answer is counted too.
    assert tokenizes(up) - before == 3
    again = await send(client, conversation, content="And again", files=[notes, report])
    assert again.status_code == 201, again.text
    assert tokenizes(up) - before == 3 + 2  # the new message and its answer only


async def test_until_a_tokenizer_counts_a_file_its_estimate_errs_high(
    engine_client: AsyncTestClient, engine_upstream: FakeUpstream, database_url: str
) -> None:
    client, up = engine_client, engine_upstream
    notes = await uploaded(client, "kyoto.md", NOTES.encode())
    made = await client.post("/api/conversations", json={"configuration": "gemma"})
    up.fail_tokenize(500, count=100)
    chip = await client.get(f"/c/{made.json()['id']}/files/{notes}/chip")
    assert chip.status_code == 200, chip.text
    stored = await stored_file(database_url, notes)
    assert stored.token_counts is None  # nothing kept: a later send counts it
    assert chip_tokens(chip.text) >= up.count(as_read(stored))
    sent = await send(client, made.json()["id"], content="Plan it", files=[notes])
    assert sent.status_code == 201, sent.text  # a tokenizer down never fails a send
    (attachment,) = sent.json()["user"]["attachments"]
    assert attachment["token_counts"]["gemma"] >= up.count(as_read(stored))


async def test_a_file_the_estimate_would_refuse_is_taken_by_its_exact_count(
    engine_client: AsyncTestClient, engine_upstream: FakeUpstream, database_url: str
) -> None:
    """Chinese text, which the estimate prices near its worst case (some five times what
    Qwen's vocabulary counts): estimated, the file alone would pass the window and be
    refused; counted by the engine's tokenizer it fits and goes."""
    client, up = engine_client, engine_upstream
    text = "\n".join(corpus()["chinese"] * 4)
    notes = await uploaded(client, "notes.txt", text.encode())
    made = await client.post("/api/conversations", json={"configuration": "gemma"})
    stored = await stored_file(database_url, notes)
    exact = up.count(as_read(stored))
    assert estimate_text(as_read(stored)) > 4096 > 2 * exact  # the estimate alone: too large
    sent = await send(client, made.json()["id"], content="总结一下", files=[notes])
    assert sent.status_code == 201, sent.text
    assert sent.json()["user"]["attachments"][0]["token_counts"] == {"gemma": exact}
