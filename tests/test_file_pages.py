"""The page's routes for files (docs/design.md section 12): the composer's chip names a file
and counts it for the conversation's model (the owner's files only); the page send and
the meter carry the chips' ids; a picture to a model that cannot see is a 400 fragment
naming the configurations that can, with nothing stored."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from tests.catalogs import SEEING
from tests.factories import user_header
from tests.factories.files import picture
from tests.test_message_files import uploaded

pytestmark = pytest.mark.settings(extra=SEEING)


async def conversation(client: AsyncTestClient, configuration: str) -> str:
    made = await client.post("/api/conversations", json={"configuration": configuration})
    assert made.status_code == 201, made.text
    conversation_id: str = made.json()["id"]
    return conversation_id


async def test_the_chip_counts_a_file_for_the_conversations_model_and_the_send_carries_it(
    client: AsyncTestClient, database_url: str
) -> None:
    seeing = await conversation(client, "seeing")
    photo = await uploaded(client, "photo.png", picture((64, 48)))
    notes = await uploaded(client, "notes.txt", b"sun hat\nsandals\n")
    chip = await client.get(f"/c/{seeing}/files/{photo}/chip")
    assert chip.status_code == 200, chip.text
    assert 'name="files" value="' + photo in chip.text
    assert "photo.png" in chip.text and " tokens" in chip.text

    bob = await user_header(database_url, "bob")
    made = await client.post("/api/conversations", json={"configuration": "seeing"}, headers=bob)
    theirs = await client.get(f"/c/{made.json()['id']}/files/{photo}/chip", headers=bob)
    assert theirs.status_code == 404  # alice's file, asked for on bob's own conversation

    meter = await client.post(f"/c/{seeing}/preview", data={"content": "", "files": [photo]})
    assert meter.status_code == 200 and 'data-preview="true"' in meter.text, meter.text

    blind = await conversation(client, "small")
    refused = await client.post(
        f"/c/{blind}/send",
        data={"content": "What is this?", "files": [photo]},
        headers={"HX-Request": "true"},
    )
    assert refused.status_code == 400 and "seeing" in refused.text, refused.text
    empty = await client.get(f"/api/conversations/{blind}")
    assert empty.json()["messages"] == []
    plain = await client.post(f"/c/{blind}/send", data={"content": "No files this time"})
    assert plain.status_code == 200, plain.text

    sent = await client.post(
        f"/c/{seeing}/send", data={"content": "What is this?", "files": [notes, photo]}
    )
    assert sent.status_code == 200, sent.text
    stored = (await client.get(f"/api/conversations/{seeing}")).json()
    user = stored["messages"][0]
    assert [a["name"] for a in user["attachments"]] == ["notes.txt", "photo.png"]
    assert stored["title"] == "What is this?"
    page = await client.get(f"/c/{seeing}/")
    assert f'<img src="/api/files/{photo}" alt="photo.png"' in page.text
    # The text file is shown once: as the part of the message that opens, not as a link too.
    assert page.text.count('aria-label="Text of notes.txt"') == 1
    assert f'href="/api/files/{notes}"' not in page.text
