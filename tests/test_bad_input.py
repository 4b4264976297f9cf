"""No input gets a 500: every route of the app, walked with hostile values (SQLite and
PostgreSQL), by each kind of caller: an API token, a signed-in browser, an embed visitor."""

from __future__ import annotations

import re
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import EMBED

pytestmark = pytest.mark.settings(extra=EMBED, rate_limit_messages=0, embed_rate_limit_messages=0)

HUGE_IDS = (2**63, 2**64, -(2**63) - 1, 10**40)
"""Past 64-bit signed integers, which both databases' drivers refuse to bind."""
DEEP_JSON = "[" * 1000 + "]" * 1000
NUL = "a\x00b"
JSON_WITH_NUL = (
    '{"content": "a\\u0000b", "title": "a\\u0000b", "configuration": "a\\u0000b", '
    '"name": "a\\u0000b"}'
)
FORM_WITH_NUL = {
    "content": NUL,
    "title": NUL,
    "configuration": NUL,
    "name": NUL,
    "username": NUL,
    "password": NUL,
    "password2": NUL,
    "next": NUL,
}
QUERY = {
    "before": str(2**63),
    "page": str(2**63),
    "per_page": str(2**64),
    "owner": NUL,
    "model": NUL,
    "configuration": NUL,
    "since": NUL,
}
LAST = ("/logout", "/delete")
"""Walked last: they end the session or the conversation the other routes use."""


def paths(template: str, conversation_id: str) -> list[str]:
    """The route's path with each integer parameter set to every huge id (one path per id),
    and the string parameters set to something that exists."""
    filled = (
        template.replace("{conversation_id:str}", conversation_id)
        .replace("{embed_name:str}", "support")
        .replace("{file_path:path}", "app.css")
        .replace("{path:str}", "openapi.json")
    )
    if ":int}" not in filled:
        return [filled]
    return [re.sub(r"\{\w+:int\}", str(number), filled) for number in HUGE_IDS]


async def test_no_route_answers_500_to_hostile_input(
    app: Litestar, callers: dict[str, AsyncTestClient]
) -> None:
    created = await callers["token"].post("/api/conversations", json={"title": "mine"})
    assert created.status_code == 201
    conversation_id = created.json()["id"]
    routes = sorted(
        (
            (route.path, method)
            for route in app.routes
            for method in getattr(route, "methods", ())
            if method not in ("OPTIONS", "HEAD")
        ),
        key=lambda item: (item[0].endswith(LAST) or item[1] == "DELETE", item),
    )
    assert len(routes) > 30, "the walk reaches the app's routes"
    failures = []
    for template, method in routes:
        for path in paths(template, conversation_id):
            for who, client in callers.items():
                attempts: list[dict[str, Any]] = [{"params": QUERY}]
                if method not in ("GET", "DELETE"):
                    json = {"content-type": "application/json"}
                    attempts += [
                        {"content": DEEP_JSON, "headers": json},
                        {"content": JSON_WITH_NUL, "headers": json},
                        {"data": FORM_WITH_NUL},
                    ]
                for attempt in attempts:
                    response = await client.request(method, path, **attempt)
                    if response.status_code >= 500:
                        failures.append((who, method, path, sorted(attempt), response.status_code))
    assert not failures, failures


async def test_json_nested_too_deeply_is_a_clear_400(callers: dict[str, AsyncTestClient]) -> None:
    response = await callers["token"].post(
        "/api/conversations", content=DEEP_JSON, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["detail"]


@pytest.mark.parametrize("number", [2**63, 2**64])
async def test_ids_past_64_bits_are_a_400(callers: dict[str, AsyncTestClient], number: int) -> None:
    created = await callers["token"].post("/api/conversations", json={})
    cid = created.json()["id"]
    browser, visitor = callers["session"], callers["visitor"]
    for client, path in [
        (browser, f"/c/{cid}/older?before={number}"),
        (visitor, f"/embed/support/older?before={number}"),
        (browser, f"/c/{cid}/answers/{number}/stream"),
        (visitor, f"/embed/support/answers/{number}/stream"),
    ]:
        assert (await client.get(path)).status_code == 400, path
    for client, path in [
        (browser, f"/c/{cid}/retry/{number}"),
        (visitor, f"/embed/support/retry/{number}"),
        (browser, f"/settings/tokens/{number}/revoke"),
    ]:
        assert (await client.post(path)).status_code == 400, path


async def test_a_user_row_id_is_no_answer_to_stream_or_retry(
    callers: dict[str, AsyncTestClient],
) -> None:
    api = callers["token"]
    cid = (await api.post("/api/conversations", json={})).json()["id"]
    sent = await api.post(f"/api/conversations/{cid}/messages", json={"content": "hello"})
    assert sent.status_code == 201
    user_id, answer_id = sent.json()["user"]["id"], sent.json()["assistant"]["id"]
    browser = callers["session"]
    assert (await browser.get(f"/c/{cid}/answers/{user_id}/stream")).status_code == 404
    assert (await browser.post(f"/c/{cid}/retry/{user_id}")).status_code == 400
    retried = await browser.post(f"/c/{cid}/retry/{answer_id}")
    assert retried.status_code == 409, "a complete answer is not sent again"
    assert "failed or interrupted" in retried.text


async def test_nul_characters_are_refused_not_stored(
    callers: dict[str, AsyncTestClient],
) -> None:
    api = callers["token"]
    refused = await api.post("/api/conversations", json={"title": NUL})
    assert refused.status_code == 400 and "NUL" in refused.json()["detail"]
    cid = (await api.post("/api/conversations", json={})).json()["id"]
    sent = await api.post(f"/api/conversations/{cid}/messages", json={"content": NUL})
    assert sent.status_code == 400 and "NUL" in sent.json()["detail"]
    renamed = await api.patch(f"/api/conversations/{cid}", json={"title": NUL})
    assert renamed.status_code == 400
    assert (await api.get(f"/api/conversations/{cid}")).json()["messages"] == []


UNREADABLE_FORMS = {
    "invalid UTF-8, escaped": ("application/x-www-form-urlencoded", b"content=%ff%fe+hi"),
    "invalid UTF-8, raw": ("application/x-www-form-urlencoded", b"content=\xff\xfe hi"),
    "an unknown charset": ("application/x-www-form-urlencoded; charset=klingon", b"content=hi"),
    "a multipart body in an unknown charset": (
        "multipart/form-data; boundary=XX; charset=klingon",
        b'--XX\r\nContent-Disposition: form-data; name="content"\r\n\r\nhi\r\n--XX--\r\n',
    ),
}


@pytest.mark.parametrize("body", UNREADABLE_FORMS.values(), ids=list(UNREADABLE_FORMS))
async def test_a_form_its_charset_cannot_read_is_a_400_and_stores_nothing(
    callers: dict[str, AsyncTestClient], body: tuple[str, bytes]
) -> None:
    """The attack: such forms were read with U+FFFD in place of the bytes (or the charset
    ignored) and stored as if typed. A charset the form names is honoured."""
    content_type, data = body
    api, browser, visitor = callers["token"], callers["session"], callers["visitor"]
    cid = (await api.post("/api/conversations", json={})).json()["id"]
    for client, path in [
        (browser, f"/c/{cid}/send"),
        (browser, "/settings/preferences"),
        (visitor, "/embed/support/send"),
    ]:
        refused = await client.post(path, content=data, headers={"content-type": content_type})
        assert refused.status_code == 400, (path, refused.status_code)
        assert "not valid in its encoding" in refused.text
    assert (await api.get(f"/api/conversations/{cid}")).json()["messages"] == []
    latin = await browser.post(
        f"/c/{cid}/rename",
        content=b"title=caf%E9",
        headers={"content-type": "application/x-www-form-urlencoded; charset=latin-1"},
    )
    assert latin.status_code < 400, latin.text
    assert (await api.get(f"/api/conversations/{cid}")).json()["title"] == "café"
