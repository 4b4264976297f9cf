"""An embed visitor attaches only what the embed's `[[embeds]]` entry allows (DESIGN
section 12), on SQLite and PostgreSQL through the fake upstream: off by default (no
file input, the upload a 403, a send naming files a 403); with `files` on, the visitor's
own uploads, of the kinds and size the entry takes, each counted by the embed's quotas,
go with the message; another visitor cannot use or delete them."""

from __future__ import annotations

import pytest
from litestar import Litestar

from tests.catalogs import SEEING
from tests.factories import EMBED, Client, found, htmx_headers
from tests.factories.files import pdf, picture
from tests.test_embed import conversations
from tests.upstream import FakeUpstream

TAKES = """
[[embeds]]
name = "photos"
configuration = "seeing"
allowed_origins = ["https://shop.example.com"]
files = ["image", "text"]
max_file_bytes = 50000
show_internals = true
"""

pytestmark = pytest.mark.settings(extra=EMBED + SEEING + TAKES, embed_rate_limit_messages=6)


async def visitor(client: Client, embed: str) -> dict[str, str]:
    page = await client.get(f"/embed/{embed}")
    assert page.status_code == 200, page.text
    return htmx_headers(page.text)


def chats(upstream: FakeUpstream) -> list[dict]:
    return [r for r in upstream.requests if r["path"].endswith("/chat/completions")]


async def test_an_embed_takes_no_files_by_default(app: Litestar, database_url: str) -> None:
    async with Client(app=app) as client:
        page = await client.get("/embed/support")
        assert "data-files-input" not in page.text and 'id="chips"' not in page.text
        headers = htmx_headers(page.text)
        refused = await client.post(
            "/embed/support/files", files={"file": ("a.png", picture())}, headers=headers
        )
        assert refused.status_code == 403 and "no files" in refused.text
        named = await client.post(
            "/embed/support/send", data={"content": "hi", "files": ["x"]}, headers=headers
        )
        assert named.status_code == 403
        assert 'name="attachment"' not in page.text and "label.attach" not in page.text
        inline = await client.post(
            "/embed/support/send",
            data={"content": "hi"},
            files={"attachment": ("notes.txt", b"some notes")},
            headers=headers,
        )
        assert inline.status_code == 403  # not even a text file's text in the message
        assert await conversations(database_url) == 0  # nothing stored


async def test_a_visitor_attaches_what_the_entry_allows_and_it_goes_with_the_message(
    app: Litestar, upstream: FakeUpstream
) -> None:
    async with Client(app=app) as client:
        page = await client.get("/embed/photos")
        assert 'data-upload-url="/embed/photos/files"' in page.text
        assert 'accept="image/png,image/jpeg,image/webp,image/gif,text/*' in page.text
        assert "application/pdf" not in page.text  # PDFs are not among its kinds
        headers = htmx_headers(page.text)

        def upload(name: str, data: bytes):  # type: ignore[no-untyped-def]
            return client.post("/embed/photos/files", files={"file": (name, data)}, headers=headers)

        document = await upload("report.pdf", pdf(["figures"]))
        assert document.status_code == 400 and "report.pdf is a PDF" in document.text
        large = await upload("big.txt", b"words " * 10_000)
        assert large.status_code == 413 and "big.txt" in large.text
        photo = await upload("photo.png", picture((64, 48)))
        assert photo.status_code == 201, photo.text
        photo_id = photo.json()["id"]
        chip = await client.get(f"/embed/photos/files/{photo_id}/chip", headers=headers)
        assert chip.status_code == 200 and " tokens" in chip.text, chip.text

        client.cookies.clear()
        other = await visitor(client, "photos")  # another visitor (no cookie, a new id)
        assert other["x-webapp-visitor"] != headers["x-webapp-visitor"]
        theirs = await client.post(
            "/embed/photos/send", data={"content": "mine?", "files": [photo_id]}, headers=other
        )
        assert theirs.status_code == 404  # another visitor's file
        gone = await client.delete(f"/embed/photos/files/{photo_id}", headers=other)
        assert gone.status_code == 404

        sent = await client.post(
            "/embed/photos/send",
            data={"content": "What is this?", "files": [photo_id]},
            headers={**headers, "HX-Request": "true"},
        )
        assert sent.status_code == 200, sent.text
        answer_id = found(r'data-role="assistant" data-message-id="(\d+)"', sent.text)
        streamed = await client.get(f"/embed/photos/answers/{answer_id}/stream", headers=headers)
        assert streamed.status_code == 200
        part = chats(upstream)[-1]["body"]["messages"][-1]["content"][1]
        assert part["image_url"]["url"].startswith("data:image/png;base64,")
        thumb = f'src="/embed/photos/files/{photo_id}"'
        assert thumb in sent.text  # the visitor's picture from the embed's own route
        shown = await client.get(f"/embed/photos/files/{photo_id}", headers=headers)
        assert shown.status_code == 200 and shown.headers["x-content-type-options"] == "nosniff"
        assert shown.content == picture((64, 48))
        other_sees = await client.get(f"/embed/photos/files/{photo_id}", headers=other)
        assert other_sees.status_code == 404


async def test_each_upload_passes_the_embeds_quota_per_address(app: Litestar) -> None:
    async with Client(app=app) as client:
        statuses = []
        for number in range(8):  # a fresh visitor each time: new cookies make no room
            client.cookies.clear()
            headers = await visitor(client, "photos")
            sent = await client.post(
                "/embed/photos/files",
                files={"file": (f"n{number}.txt", f"note {number}".encode())},
                headers=headers,
            )
            statuses.append(sent.status_code)
        assert statuses[:6] == [201] * 6 and statuses[6:] == [429, 429], statuses
