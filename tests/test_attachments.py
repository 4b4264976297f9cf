"""Text files attached to a message (SQLite and PostgreSQL, the fake upstream over HTTP):
the file's text goes to the model and is counted, stored and found with the message;
binary files, text that is not UTF-8 and files over the size limit are refused with a
400 that names the file, and nothing is stored."""

from __future__ import annotations

import asyncio

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import user_header
from tests.upstream import FakeUpstream
from webapp.chat.stored.attachments import (
    Attachment,
    attach,
    attachment_html,
    split_attachment,
    split_attachments,
)

NOTES = "Meeting notes\nThe aardvark budget is ```fenced``` twice.\nZebras next week.\n"


def test_the_file_is_fenced_under_its_name_and_splits_back() -> None:
    content = attach("Summarise this", Attachment("notes.txt", NOTES), 10_000)
    assert content.startswith("Summarise this\n\nAttached file `notes.txt`:\n\n````\n")
    assert content.endswith("Zebras next week.\n````")  # longer than the file's own fences
    typed, found, between, closing = split_attachment(content)
    assert typed == "Summarise this" and found == Attachment("notes.txt", NOTES.strip("\n"))
    assert typed + between + found.text + closing == content
    assert split_attachment("no file here")[1] is None


def test_several_files_each_fold_into_a_part_of_their_own_and_join_back() -> None:
    """A message of several files (the composer's chips) shows each file once, as a part
    under its own name, and the page's text is still the message exactly."""
    typed = "Compare these; Attached file `fake`: is only typed"
    content = typed
    for name, text in [("a.md", NOTES), ("b.csv", "x,y\n1,2"), ("c.py", "print('`')")]:
        content = attach(content, Attachment(name, text), 10_000)
    rest, parts = split_attachments(content)
    assert rest == typed
    assert [(a.name, a.text) for a, _, _ in parts] == [
        ("a.md", NOTES.strip("\n")),
        ("b.csv", "x,y\n1,2"),
        ("c.py", "print('`')"),
    ]
    assert rest + "".join(b + a.text + c for a, b, c in parts) == content
    html = str(attachment_html(content))
    assert [html.count(f'aria-label="Text of {n}"') for n in ("a.md", "b.csv", "c.py")] == [1] * 3
    alone = attach("", Attachment("only.txt", "just the file"), 10_000)
    assert split_attachments(alone) == (
        "",
        [(Attachment("only.txt", "just the file"), alone[: alone.index("just")], "\n```")],
    )
    assert split_attachments("no file here ```") == ("no file here ```", [])


@pytest.mark.settings(max_message_chars=2_000)
async def test_an_attached_file_is_sent_counted_stored_and_refused_when_not_text(
    app: Litestar, database_url: str, upstream: FakeUpstream
) -> None:
    auth = await user_header(database_url, "alice")
    async with AsyncTestClient(app=app) as client:
        made = await client.post(
            "/api/conversations", json={"configuration": "small"}, headers=auth
        )
        conversation_id = made.json()["id"]

        async def page_send(name: str, data: bytes, typed: str = "Summarise") -> int:
            sent = await client.post(
                f"/c/{conversation_id}/send",
                data={"content": typed},
                files={"attachment": (name, data, "text/plain")},
                headers={**auth, "hx-request": "true"},
            )
            assert sent.status_code in (200, 400), sent.text
            if sent.status_code == 400:
                assert name in sent.text, sent.text  # the reason names the file
            return sent.status_code

        async def stored() -> list[dict[str, object]]:
            got = await client.get(f"/api/conversations/{conversation_id}", headers=auth)
            messages: list[dict[str, object]] = got.json()["messages"]
            return messages

        assert await page_send("../secret/notes.txt", NOTES.encode()) == 200
        for _ in range(100):  # the page's send answers before the answer is written
            if (await stored())[-1]["status"] != "streaming":
                break
            await asyncio.sleep(0.05)
        user = (await stored())[0]
        assert user["content"] == attach("Summarise", Attachment("notes.txt", NOTES), 2_000)
        sent = [r for r in upstream.requests if r["path"].endswith("/chat/completions")]
        assert "Zebras next week." in sent[-1]["body"]["messages"][-1]["content"]
        fit = user["fit"]
        assert isinstance(fit, dict) and fit["estimated_tokens"] > 20  # the file is counted
        found = await client.get("/api/search", params={"q": "zebras"}, headers=auth)
        assert [hit["message_id"] for hit in found.json()["results"]] == [user["id"]]
        exported = await client.get(
            f"/api/conversations/{conversation_id}/export",
            params={"format": "markdown"},
            headers=auth,
        )
        assert "Attached file `notes.txt`:" in exported.text

        assert await page_send("photo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") == 400
        assert await page_send("latin1.txt", "café".encode("latin-1")) == 400
        assert await page_send("big.txt", b"word " * 500) == 400
        assert len(await stored()) == 2, "nothing refused was stored"

        api = f"/api/conversations/{conversation_id}/messages"
        by_api = await client.post(
            api,
            json={"content": "And this?", "attachment": {"name": "b.md", "text": "# Beta\n"}},
            headers=auth,
        )
        assert by_api.status_code == 201, by_api.text
        assert by_api.json()["user"]["content"].endswith(
            "Attached file `b.md`:\n\n```\n# Beta\n```"
        )
        nul = await client.post(
            api,
            json={"content": "x", "attachment": {"name": "n.txt", "text": "a\x00b"}},
            headers=auth,
        )
        assert nul.status_code == 400 and "n.txt" in nul.text
