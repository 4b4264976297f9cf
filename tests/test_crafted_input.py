"""Crafted text is a clear 400 wherever a user sends it, never a 500, and nothing of it is
stored (SQLite and PostgreSQL): lone surrogates (half of a UTF-16 pair, no character),
form fields in encodings that make one or that do not exist, NUL in an import's
tokenizer names, import times out of range; and an import's times keep their instant.
A bad text never takes a shared tokenizer for down. (The gateway's side of this is in
tests/test_gateway_limits.py, over real HTTP.)"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.catalogs import catalog_for
from tests.factories import EMBED
from tests.upstream import FakeUpstream
from webapp.llm.tokenizers import ServerTokenizer, Tokenizers, TokenizerUnavailable

JSON = {"content-type": "application/json"}
ESCAPED = '"a\\ud800b"'
"""A JSON string holding a lone high surrogate (Python's json reads it; msgspec does not)."""
BOUNDARY = "crafted"

pytestmark = pytest.mark.settings(extra=EMBED, rate_limit_messages=0, embed_rate_limit_messages=0)
"""As the bad input tests: `callers` are three clients of the app (an API token, a
signed-in browser, an embed visitor), on both databases."""


def multipart(field: str, data: bytes, charset: str | None = None) -> dict[str, Any]:
    """A form with one field, its bytes as given, in `charset` if named."""
    kind = f"Content-Type: text/plain; charset={charset}\r\n" if charset else ""
    body = (
        (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{field}"\r\n{kind}\r\n').encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return {
        "content": body,
        "headers": {"content-type": f"multipart/form-data; boundary={BOUNDARY}"},
    }


FORMS = {
    "bytes no UTF-8 reads (an encoded surrogate)": (b"a\xed\xa0\x80b", None),
    "a charset that makes a lone surrogate": (b"a\\ud800b", "unicode_escape"),
    "a charset that does not exist": (b"hello", "no-such-charset"),
}


def export(**changes: Any) -> dict[str, Any]:
    """A valid export of one exchange; `changes` replace its parts."""
    data: dict[str, Any] = {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Imported", "created_at": "2024-05-01T12:00:00Z"},
        "messages": [
            {"role": "user", "content": "hello", "created_at": "2024-05-01T12:00:00Z"},
            {"role": "assistant", "content": "hi", "created_at": "2024-05-01T12:00:05Z"},
        ],
    }
    for path, value in changes.items():
        target: Any = data
        *parents, last = path.split(".")
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[last] = value
    return data


async def conversations(api: AsyncTestClient) -> list[dict[str, Any]]:
    listed = await api.get("/api/conversations")
    assert listed.status_code == 200
    return list(listed.json())


# ---- lone surrogates and undecodable forms ------------------------------------------------------


async def test_a_lone_surrogate_is_a_clear_400_wherever_text_is_sent(
    callers: dict[str, AsyncTestClient],
) -> None:
    api, browser, visitor = callers["token"], callers["session"], callers["visitor"]
    cid = (await api.post("/api/conversations", json={"title": "mine"})).json()["id"]
    before = await conversations(api)
    failures: list[tuple[str, str, int, str]] = []

    def check(what: str, status: int, text: str) -> None:
        if status != 400:
            failures.append((what, "", status, text[:200]))

    # The JSON API (msgspec refuses the escape as it decodes).
    for what, method, path, field in [
        ("create", "POST", "/api/conversations", "title"),
        ("send", "POST", f"/api/conversations/{cid}/messages", "content"),
        ("preview", "POST", f"/api/conversations/{cid}/preview", "content"),
        ("rename", "PATCH", f"/api/conversations/{cid}", "title"),
    ]:
        body = '{"' + field + '": ' + ESCAPED + "}"
        response = await api.request(method, path, content=body, headers=JSON)
        check(f"api {what}", response.status_code, response.text)
    # A query string cannot carry one: its bytes are read as UTF-8 with replacement
    # (U+FFFD), so a search finds what the rest of it says, or has no word to look for.
    for query, status in (("a%ED%A0%80", 200), ("%ED%A0%80", 400)):
        for client, path in ((api, "/api/search"), (browser, "/search")):
            response = await client.get(f"{path}?q={query}")
            if response.status_code != status:
                failures.append((path, query, response.status_code, response.text[:200]))
    # The pages' forms: every field a user types into, in every crafted encoding.
    for what, (data, charset) in FORMS.items():
        for client, path, field in [
            (browser, f"/c/{cid}/send", "content"),
            (browser, f"/c/{cid}/preview", "content"),
            (browser, f"/c/{cid}/rename", "title"),
            (visitor, "/embed/support/send", "content"),
            (visitor, "/embed/support/preview", "content"),
        ]:
            response = await client.post(path, **multipart(field, data, charset))
            check(f"{path} {field}: {what}", response.status_code, response.text)
    assert not failures, failures
    # Nothing was stored: no message, the title unchanged, no new conversation.
    assert await conversations(api) == before
    assert (await api.get(f"/api/conversations/{cid}")).json()["messages"] == []


async def test_the_refusal_says_what_is_wrong(callers: dict[str, AsyncTestClient]) -> None:
    api = callers["token"]
    cid = (await api.post("/api/conversations", json={})).json()["id"]
    browser = callers["session"]
    data, charset = FORMS["a charset that makes a lone surrogate"]
    form = multipart("content", data, charset)
    sent = await browser.post(
        f"/c/{cid}/send",
        content=form["content"],
        headers={**form["headers"], "hx-request": "true"},
    )
    assert sent.status_code == 400 and "lone surrogate" in sent.text
    data, _ = FORMS["bytes no UTF-8 reads (an encoded surrogate)"]
    form = multipart("content", data)
    sent = await api.post(
        f"/c/{cid}/send",
        content=form["content"],
        headers={**form["headers"], "accept": "application/json"},
    )
    assert sent.status_code == 400 and "not valid in its encoding" in sent.json()["detail"]


async def test_an_import_with_a_lone_surrogate_stores_nothing(
    callers: dict[str, AsyncTestClient],
) -> None:
    api, browser = callers["token"], callers["session"]
    before = await conversations(api)
    escaped = json.dumps(export(**{"messages.0.content": "PLACE"})).replace('"PLACE"', ESCAPED)
    as_bytes = escaped.replace(ESCAPED, '"\udcff"').encode("utf-8", "surrogatepass")
    in_a_name = json.dumps(export(**{"messages.0.token_counts": {"PLACE": 3}}))
    in_a_name = in_a_name.replace('"PLACE"', ESCAPED)
    for what, file in [
        ("escaped", escaped.encode()),
        ("as UTF-8 bytes", as_bytes),
        ("in a tokenizer name", in_a_name.encode()),
    ]:
        page = await browser.post(
            "/c/import", files={"file": ("export.json", file, "application/json")}
        )
        assert page.status_code == 400, (what, page.status_code, page.text[:200])
        assert "surrogate" in page.text or "not JSON" in page.text, what
        by_api = await api.post("/api/conversations/import", content=file, headers=JSON)
        assert by_api.status_code == 400, (what, by_api.text)
    assert await conversations(api) == before


# ---- import: times and tokenizer names ----------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    ["conversation.created_at", "messages.0.created_at", "messages.1.created_at"],
)
@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+05:00"])
async def test_an_import_time_out_of_range_in_utc_is_a_400_that_stores_nothing(
    callers: dict[str, AsyncTestClient], field: str, value: str
) -> None:
    api, browser = callers["token"], callers["session"]
    before = await conversations(api)
    data = export(**{field: value})
    refused = await api.post("/api/conversations/import", json=data)
    assert refused.status_code == 400, refused.text
    assert "out of range" in refused.json()["detail"]
    assert field.replace(".0.", "[0].").replace(".1.", "[1].") in refused.json()["detail"]
    page = await browser.post(
        "/c/import", files={"file": ("export.json", json.dumps(data).encode(), "text/json")}
    )
    assert page.status_code == 400 and "out of range" in page.text
    assert await conversations(api) == before


async def test_a_nul_in_a_tokenizer_name_is_a_400_that_stores_nothing(
    callers: dict[str, AsyncTestClient],
) -> None:
    api = callers["token"]
    before = await conversations(api)
    data = export(**{"messages.0.token_counts": {"tiktoken:cl100k\x00base": 3}})
    refused = await api.post("/api/conversations/import", json=data)
    assert refused.status_code == 400, refused.text
    assert "NUL" in refused.json()["detail"] and "token_counts" in refused.json()["detail"]
    assert await conversations(api) == before


async def test_import_times_keep_their_instant(callers: dict[str, AsyncTestClient]) -> None:
    """Both databases keep an instant, not the offset it was written with (PostgreSQL's
    timestamptz converts to UTC; SQLite's column would have kept the wall time and dropped
    the offset, turning 12:00+05:00 into 12:00Z): the export says the same instant in UTC."""
    api = callers["token"]
    data = export(
        **{
            "conversation.created_at": "2024-05-01T12:00:00-03:30",
            "messages.0.created_at": "2024-05-01T12:00:00+05:00",
            "messages.1.created_at": "2024-05-01T12:00:05.250+05:00",
        }
    )
    imported = await api.post("/api/conversations/import", json=data)
    assert imported.status_code == 201, imported.text
    exported = await api.get(
        f"/api/conversations/{imported.json()['id']}/export", params={"format": "json"}
    )
    body = exported.json()
    assert body["conversation"]["created_at"] == "2024-05-01T15:30:00Z"
    assert [m["created_at"] for m in body["messages"]] == [
        "2024-05-01T07:00:00Z",
        "2024-05-01T07:00:05.250000Z",
    ]
    # And a round trip of the export keeps them.
    again = await api.post("/api/conversations/import", json=copy.deepcopy(body))
    assert again.status_code == 201
    reexported = await api.get(
        f"/api/conversations/{again.json()['id']}/export", params={"format": "json"}
    )
    assert [m["created_at"] for m in reexported.json()["messages"]] == [
        m["created_at"] for m in body["messages"]
    ]


# ---- a shared tokenizer -------------------------------------------------------------------------


async def test_a_text_that_cannot_be_sent_does_not_rest_the_tokenizer(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A lone surrogate cannot be written as UTF-8, so its tokenize request is never
    made: that says nothing of the endpoint, which must go on counting for everyone."""
    up = engine_upstream
    up.set_engine("llamacpp")
    async with Tokenizers() as tokenizers:
        catalog = catalog_for(tmp_path, up)
        await tokenizers.probe(catalog)
        tokenizer = tokenizers.for_model(catalog.models["m"])
        assert isinstance(tokenizer, ServerTokenizer)
        with pytest.raises(TokenizerUnavailable, match="cannot send the text"):
            await tokenizer.count(["fine", "a\ud800b"])
        assert not tokenizer.is_down
        assert await tokenizer.count(["hello"]) == [up.count("hello")]
