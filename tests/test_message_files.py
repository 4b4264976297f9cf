"""Messages made of parts (docs/design.md section 12), on SQLite and PostgreSQL through the fake
upstream over HTTP: a message carries the caller's files, text and PDFs as text under
their names and pictures as image parts, each counted by the serving model's rule; a
picture goes only to models that see; a turn's files go where the cut puts the turn,
and the fit says which were sent and which left out."""

from __future__ import annotations

import base64
from io import BytesIO
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from PIL import Image
from sqlalchemy import func, select

from tests.catalogs import SEEING
from tests.dbutil import session_on
from tests.factories import bearer_header, make_account, new_conversation, user_header
from tests.factories.files import pdf, picture
from tests.upstream import FakeUpstream
from webapp.accounts.service import AccountService
from webapp.chat.files.models import FileBlob, MessageFile, StoredFile
from webapp.db import Database
from webapp.llm.images import image_tokens

pytestmark = pytest.mark.settings(extra=SEEING, max_files_per_message=3)


async def uploaded(client: AsyncTestClient, name: str, data: bytes, **kw: Any) -> str:
    sent = await client.post("/api/files", files={"file": (name, data)}, **kw)
    assert sent.status_code == 201, sent.text
    file_id: str = sent.json()["id"]
    return file_id


async def send(client: AsyncTestClient, conversation_id: str, **body: Any) -> Any:
    return await client.post(f"/api/conversations/{conversation_id}/messages", json=body)


def test_pictures_are_counted_by_each_providers_published_rule() -> None:
    assert image_tokens("openai", 1024, 1024) == 765  # 4 tiles after the 768 side
    assert image_tokens("openai", 2048, 4096) == 1105  # 1024 x 2048, then 768 x 1536
    assert image_tokens("openai", 4000, 100) == 85 + 170 * 4  # 2048 x 51: 4 tiles
    assert image_tokens("anthropic", 1092, 1092) == 1590  # width x height / 750
    assert image_tokens("anthropic", 200, 200) == 54
    assert image_tokens("anthropic", 4000, 3000) == 1600  # long edge 1568, area capped
    assert image_tokens("gemini", 300, 200) == 258
    assert image_tokens("gemini", 1000, 1000) == 4 * 258  # 768-pixel tiles
    assert image_tokens("openai", 4000, 3000, fixed=300) == 300


async def test_a_message_carries_text_pdf_and_picture_to_a_model_that_sees(
    client: AsyncTestClient, upstream: FakeUpstream, database_url: str
) -> None:
    notes = await uploaded(client, "notes.md", b"# Aardvark notes\nZebras next week.\n")
    report = await uploaded(client, "report.pdf", pdf(["Quarterly okapi figures"]))
    photo = await uploaded(client, "photo.png", picture((64, 48)))
    conversation = await new_conversation(client, configuration="seeing")
    sent = await send(client, conversation["id"], content="Look", files=[notes, report, photo])
    assert sent.status_code == 201, sent.text
    user = sent.json()["user"]

    last = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    text_part, image_part = last["body"]["messages"][-1]["content"]
    assert text_part["type"] == "text" and text_part["text"].startswith("Look\n\n")
    assert "Attached file `notes.md`" in text_part["text"] and "Zebras" in text_part["text"]
    assert "Quarterly okapi figures" in text_part["text"]  # the PDF as its text
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert Image.open(BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (64, 48)

    kinds = [(a["id"], a["name"], a["kind"]) for a in user["attachments"]]
    assert kinds == [
        (notes, "notes.md", "text"),
        (report, "report.pdf", "document"),
        (photo, "photo.png", "image"),
    ]
    # Counted per model that may read it; "large" cannot see, so it is not in the chain.
    assert user["attachments"][2]["token_counts"] == {"seer": 85 + 170, "seer-local": 300}
    assert user["fit"]["attachments_sent"] == [notes, report, photo]
    assert user["fit"]["attachments_left_out"] == []
    assert user["estimated_tokens"] >= 300  # the picture at the costliest rule
    read = await client.get(f"/api/conversations/{conversation['id']}")
    assert read.json()["messages"][0]["attachments"] == user["attachments"]
    assert read.json()["title"] == "Look"  # what was typed, not a file's wrapper

    used = await client.delete(f"/api/files/{photo}")
    assert used.status_code == 409 and "photo.png" in used.json()["detail"]

    bob = await user_header(database_url, "bob")
    theirs = await uploaded(client, "theirs.txt", b"bob's own", headers=bob)
    assert (await send(client, conversation["id"], content="x", files=[theirs])).status_code == 404
    many = await send(client, conversation["id"], content="x", files=["a", "b", "c", "d"])
    assert many.status_code == 400 and "3 files" in many.json()["detail"]
    after = await client.get(f"/api/conversations/{conversation['id']}")
    assert len(after.json()["messages"]) == 2  # the refused sends stored nothing
    assert (await client.delete(f"/api/conversations/{conversation['id']}")).status_code == 204
    assert (await client.delete(f"/api/files/{photo}")).status_code == 204  # used no more


async def test_files_alone_are_a_message_and_an_empty_one_without_files_is_not(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    notes = await uploaded(client, "packing.md", b"# Packing\nSun cream, a hat.\n")
    photo = await uploaded(client, "beach.png", picture((32, 32)))
    conversation = await new_conversation(client, configuration="seeing")
    empty = await send(client, conversation["id"], content="  ")
    assert empty.status_code == 400 and "attach a file" in empty.json()["detail"]
    sent = await send(client, conversation["id"], content="", files=[notes, photo])
    assert sent.status_code == 201, sent.text
    asked = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    text_part, image_part = asked["body"]["messages"][-1]["content"]
    assert "Attached file `packing.md`" in text_part["text"] and "Sun cream" in text_part["text"]
    assert image_part["type"] == "image_url"
    read = await client.get(f"/api/conversations/{conversation['id']}")
    assert read.json()["title"] == "packing.md"  # the first file's name, not its wrapper


async def test_a_picture_to_a_model_that_cannot_see_is_refused_and_nothing_stored(
    client: AsyncTestClient,
) -> None:
    photo = await uploaded(client, "photo.png", picture())
    seeing = await new_conversation(client, configuration="seeing")
    preview = f"/api/conversations/{seeing['id']}/preview"
    bare = await client.post(preview, json={"content": "What is this?"})
    shown = await client.post(preview, json={"content": "What is this?", "files": [photo]})
    assert shown.status_code == 200, shown.text
    assert shown.json()["fit"]["attachments_sent"] == [photo]  # the meter counts it too
    grown = shown.json()["fit"]["estimated_tokens"] - bare.json()["fit"]["estimated_tokens"]
    assert 300 <= grown <= 302  # seer-local's figure, the costliest of the route
    conversation = await new_conversation(client, configuration="medium")
    blind = f"/api/conversations/{conversation['id']}/preview"
    refused = await client.post(blind, json={"content": "What is this?", "files": [photo]})
    assert refused.status_code == 400 and "medium" in refused.json()["detail"]
    refused = await send(client, conversation["id"], content="What is this?", files=[photo])
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert "medium" in detail and "seeing" in detail and "seeing-small" in detail
    stored = await client.get(f"/api/conversations/{conversation['id']}")
    assert stored.json()["messages"] == []


async def test_a_turns_picture_is_left_out_with_it_and_the_fit_names_it(
    client: AsyncTestClient, upstream: FakeUpstream, database_url: str
) -> None:
    upstream.set_reply("ok")
    conversation = await new_conversation(client, configuration="seeing-small")
    photo = await uploaded(client, "photo.png", picture())
    assert (await send(client, conversation["id"], content="Hello")).status_code == 201
    with_photo = await send(client, conversation["id"], content="See this", files=[photo])
    assert with_photo.json()["user"]["fit"]["attachments_sent"] == [photo]
    words = "word " * 250
    for _ in range(4):
        last = await send(client, conversation["id"], content=words)
        assert last.status_code == 201, last.text
    fit = last.json()["user"]["fit"]
    assert fit["left_out"], fit  # the turn with the picture, among others
    assert fit["attachments_left_out"] == [photo] and fit["attachments_sent"] == []
    sent = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    assert "image_url" not in str(sent["body"]["messages"])
    admin = await user_header(database_url, "root", admin=True)
    review = await client.get(f"/admin/c/{conversation['id']}", headers=admin)
    assert review.status_code == 200
    assert "Files left out</dt><dd>photo.png, 255 tokens</dd>" in review.text


@pytest.mark.settings(extra=SEEING)
async def test_a_file_larger_than_the_models_budget_is_refused_before_anything_is_stored(
    client: AsyncTestClient,
) -> None:
    big = await uploaded(client, "big.txt", ("okapi zebra " * 2000).encode())
    conversation = await new_conversation(client, configuration="seeing-small")
    refused = await send(client, conversation["id"], content="Read", files=[big])
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert "big.txt" in detail and "1,024" in detail and "tokens" in detail, detail
    stored = await client.get(f"/api/conversations/{conversation['id']}")
    assert stored.json()["messages"] == []


async def test_an_export_carries_the_files_and_an_import_brings_every_byte_and_count_back(
    client: AsyncTestClient, database_url: str
) -> None:
    notes = await uploaded(client, "notes.md", b"# Okapi\nstripes\n")
    photo = await uploaded(client, "photo.jpg", picture((40, 30), kind="JPEG", gps=True))
    conversation = await new_conversation(client, configuration="seeing")
    sent = await send(client, conversation["id"], content="Look", files=[notes, photo])
    assert sent.status_code == 201, sent.text
    exported = await client.get(f"/api/conversations/{conversation['id']}/export")
    document = exported.json()
    assert sorted(f["id"] for f in document["files"]) == sorted([notes, photo])

    bob = await user_header(database_url, "bob")
    imported = await client.post("/api/conversations/import", json=document, headers=bob)
    assert imported.status_code == 201, imported.text
    user = imported.json()["messages"][0]
    original = sent.json()["user"]
    new_ids = [a["id"] for a in user["attachments"]]
    assert set(new_ids).isdisjoint({notes, photo})  # bob's own files now
    assert [{**a, "id": None} for a in user["attachments"]] == [
        {**a, "id": None} for a in original["attachments"]
    ]
    assert user["fit"]["attachments_sent"] == new_ids
    for old, new in zip([notes, photo], new_ids, strict=True):
        mine = await client.get(f"/api/files/{old}")
        theirs = await client.get(f"/api/files/{new}", headers=bob)
        assert theirs.status_code == 200 and theirs.content == mine.content

    broken = {**document, "files": [{**document["files"][0], "data": "not base64!"}]}
    refused = await client.post("/api/conversations/import", json=broken, headers=bob)
    assert refused.status_code == 400 and "base64" in refused.json()["detail"]
    missing = {**document, "files": document["files"][:1]}
    refused = await client.post("/api/conversations/import", json=missing, headers=bob)
    assert refused.status_code == 400, refused.text
    listed = await client.get("/api/conversations", headers=bob)
    assert len(listed.json()) == 1  # the refused imports left nothing behind


async def test_the_gateway_sends_pictures_only_to_models_that_see(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    url = "data:image/png;base64," + base64.b64encode(picture()).decode("ascii")
    asked = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]
    refused = await client.post("/v1/chat/completions", json={"model": "medium", "messages": asked})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "image_not_supported" and "medium" in error["message"]
    answered = await client.post(
        "/v1/chat/completions", json={"model": "seeing", "messages": asked}
    )
    assert answered.status_code == 200, answered.text
    sent = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    assert sent["body"]["messages"][-1]["content"][1]["image_url"]["url"] == url
    text_only = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}]}]
    plain = await client.post(
        "/v1/chat/completions", json={"model": "seeing", "messages": text_only}
    )
    # Counted by the costliest rule of the models that see (seer-local's 300), not the
    # estimator's fixed 1,600: the call without the picture is about 300 tokens less
    # (the model's calibration may round the sum up by one).
    estimated = answered.json()["webapp"]["estimated_tokens"]
    assert 300 <= estimated - plain.json()["webapp"]["estimated_tokens"] <= 302


async def test_deleting_a_user_deletes_their_files_with_their_messages(
    client: AsyncTestClient, database_url: str, accounts: AccountService
) -> None:
    user_id, token = await make_account(database_url, "carol")
    carol = bearer_header(token)
    photo = await uploaded(client, "photo.png", picture(), headers=carol)
    made = await client.post("/api/conversations", json={"configuration": "seeing"}, headers=carol)
    sent = await client.post(
        f"/api/conversations/{made.json()['id']}/messages",
        json={"content": "Look", "files": [photo]},
        headers=carol,
    )
    assert sent.status_code == 201, sent.text
    assert await accounts.delete_user(user_id)
    async with session_on(Database(database_url)) as session:
        for table in (StoredFile, FileBlob, MessageFile):
            assert await session.scalar(select(func.count()).select_from(table)) == 0
