"""The files API (docs/design.md section 12), on SQLite and PostgreSQL: an upload is told by its
bytes, kept once per owner and content, stripped of its metadata and served back only to
its owner and to admins; every bad file is a 4xx naming it, with nothing stored; reading
a large picture and PDF never stalls the event loop."""

from __future__ import annotations

import base64
import hashlib
from io import BytesIO

import pytest
from litestar.testing import AsyncTestClient
from PIL import Image
from sqlalchemy import func, select

from tests.catalogs import SEEING
from tests.dbutil import session_on
from tests.factories import PASSWORD, csrf_from, user_header
from tests.factories.files import GPS_IFD, pdf, picture, png_claiming
from tests.looplag import watching_app
from tests.upstream import FakeUpstream
from webapp.chat.files.models import FileBlob, StoredFile
from webapp.db import Database

STALL = 0.1


async def upload(
    client: AsyncTestClient,
    name: str,
    data: bytes,
    media_type: str = "application/octet-stream",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, object]]:
    sent = await client.post(
        "/api/files", files={"file": (name, data, media_type)}, headers=headers or {}
    )
    return sent.status_code, sent.json()


async def counted(database_url: str) -> tuple[int, int]:
    """(uploads kept, distinct contents kept) in the database."""
    async with session_on(Database(database_url)) as session:
        files = await session.scalar(select(func.count()).select_from(StoredFile))
        blobs = await session.scalar(select(func.count()).select_from(FileBlob))
    return int(files or 0), int(blobs or 0)


async def test_files_are_kept_once_stripped_and_served_only_to_their_owner(
    client: AsyncTestClient, database_url: str
) -> None:
    photo = picture(kind="JPEG", gps=True)
    status, sent = await upload(client, "../holiday.jpg", photo, "image/jpeg")
    assert status == 201, sent
    assert sent["name"] == "holiday.jpg" and sent["kind"] == "image"
    assert sent["media_type"] == "image/jpeg"
    got = await client.get(f"/api/files/{sent['id']}")
    assert got.status_code == 200
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-disposition"].startswith('inline; filename="holiday.jpg"')
    assert sent["sha256"] == hashlib.sha256(got.content).hexdigest()
    assert sent["size"] == len(got.content)
    kept = Image.open(BytesIO(got.content))
    assert kept.size == (64, 48) and not kept.getexif().get_ifd(GPS_IFD)
    assert not dict(kept.getexif())  # no camera, no position: nothing of the EXIF

    status, again = await upload(client, "copy.jpg", photo, "image/jpeg")
    assert status == 201 and again["id"] != sent["id"] and again["sha256"] == sent["sha256"]
    assert await counted(database_url) == (2, 1)  # the same bytes once

    notes = b"# Notes\n<script>alert(1)</script>\n| a | b |\n"
    status, text = await upload(client, "notes.md", notes, "text/html")
    assert status == 201 and (text["kind"], text["media_type"]) == ("text", "text/markdown")
    served = await client.get(f"/api/files/{text['id']}")
    assert served.headers["content-type"].startswith("text/plain")  # never run as a page
    assert served.headers["content-disposition"].startswith("attachment;")
    assert served.content == notes
    status, document = await upload(client, "report.pdf", pdf(["Aardvark", "Zebra"]))
    assert status == 201 and (document["kind"], document["media_type"]) == (
        "document",
        "application/pdf",
    )
    gif = picture(kind="GIF")
    status, frame = await upload(client, "wave.gif", gif, "image/gif")
    assert status == 201 and frame["media_type"] == "image/png"  # its first frame

    bob = await user_header(database_url, "bob")
    assert (await client.get(f"/api/files/{sent['id']}", headers=bob)).status_code == 404
    assert (await client.delete(f"/api/files/{sent['id']}", headers=bob)).status_code == 404
    admin = await user_header(database_url, "root", admin=True)
    by_token = await client.get(f"/api/files/{sent['id']}", headers=admin)
    assert by_token.status_code == 404  # an admin's token reads its owner's files only
    token = client.headers.pop("Authorization")
    form = {"username": "root", "password": PASSWORD}
    page = await client.get("/login")
    signed = await client.post(
        "/login", data={**form, "_csrf_token": csrf_from(page.text)}, follow_redirects=False
    )
    assert signed.status_code == 303  # the review's reader: an admin signed in
    assert (await client.get(f"/api/files/{sent['id']}")).content == got.content
    client.headers["Authorization"] = token  # alice again

    assert (await client.delete(f"/api/files/{sent['id']}")).status_code == 204
    assert (await client.get(f"/api/files/{sent['id']}")).status_code == 404
    assert (await client.get(f"/api/files/{again['id']}")).status_code == 200  # shared bytes
    assert (await client.delete(f"/api/files/{again['id']}")).status_code == 204
    assert await counted(database_url) == (3, 3)  # the photo's bytes went with its last file


@pytest.mark.settings(
    max_file_bytes=150_000, user_file_quota_bytes=250_000, max_message_chars=200_000
)
async def test_bad_files_are_refused_naming_them_and_nothing_is_stored(
    client: AsyncTestClient, database_url: str
) -> None:
    svg = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>'
    refusals = {
        "photo.png": (svg, "image/png", 400, "SVG"),
        "page.svg": (svg, "text/plain", 400, "SVG"),
        "shot.jpg": (b"<!DOCTYPE html><html><body>hi</body></html>", "image/jpeg", 400, "SVG"),
        "lying.txt": (b"\x00\x01\x02binary", "text/plain", 400, "not a file this app reads"),
        "latin1.txt": ("café".encode("latin-1"), "text/plain", 400, "UTF-8"),
        "bomb.png": (png_claiming(100_000, 100_000), "image/png", 400, "pixels"),
        "cut.png": (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "image/png", 400, "not a picture"),
        "broken.pdf": (b"%PDF-1.4\nthis is no PDF at all", "application/pdf", 400, "PDF"),
        "empty.txt": (b"", "text/plain", 400, "empty"),
        "big.txt": (b"a" * 150_001, "text/plain", 413, "150,000"),
    }
    for name, (data, media_type, status, reason) in refusals.items():
        got, body = await upload(client, name, data, media_type)
        assert got == status, (name, body)
        assert name in str(body["detail"]) and reason in str(body["detail"]), body
    assert await counted(database_url) == (0, 0)

    first = b"x" * 140_000
    assert (await upload(client, "one.txt", first))[0] == 201
    status, body = await upload(client, "two.txt", b"y" * 140_000)
    assert status == 413 and "quota" in str(body["detail"]), body
    assert (await upload(client, "again.txt", first))[0] == 201  # no new bytes: within it
    assert await counted(database_url) == (2, 1)


@pytest.mark.settings(file_read_seconds=0.000001)
async def test_a_file_that_takes_too_long_to_read_is_refused(
    client: AsyncTestClient, database_url: str
) -> None:
    status, body = await upload(client, "long.pdf", pdf(["page"] * 3))
    assert status == 422 and "long.pdf" in str(body["detail"]), body
    assert await counted(database_url) == (0, 0)


@pytest.mark.settings(extra=SEEING)
async def test_reading_a_large_picture_and_pdf_and_sending_them_does_not_stall_the_loop(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    photo = picture((3000, 2000), kind="JPEG")
    document = pdf([f"Page {n}: " + "words " * 80 for n in range(40)])
    made = await client.post("/api/conversations", json={"configuration": "seeing"})
    with watching_app(client) as lag:
        status, kept_photo = await upload(client, "photo.jpg", photo)
        assert status == 201
        status, kept_document = await upload(client, "book.pdf", document)
        assert status == 201
        sent = await client.post(
            f"/api/conversations/{made.json()['id']}/messages",
            json={"content": "Both", "files": [kept_document["id"], kept_photo["id"]]},
        )
        assert sent.status_code == 201, sent.text
    assert lag.ticks > 0 and lag.busiest < STALL, f"the loop stalled {lag.busiest:.3f} s"
    asked = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    url = asked["body"]["messages"][-1]["content"][1]["image_url"]["url"]
    scaled = Image.open(BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert scaled.size == (2048, 1365)  # scaled to OpenAI's long edge before sending
