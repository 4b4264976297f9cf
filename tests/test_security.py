"""Accounts, CSRF, framing and isolation through the real app (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import (
    EMBED,
    PASSWORD,
    Client,
    bearer_header,
    csrf_from,
    found,
    make_user,
    sign_in,
)

pytestmark = pytest.mark.settings(extra=EMBED, rate_limit_messages=3)


async def test_first_run_setup_creates_the_admin_once(browser: AsyncTestClient) -> None:
    first = await browser.get("/")
    assert first.status_code == 303 and first.headers["location"].startswith("/login")
    login = await browser.get("/login")
    assert login.status_code == 303 and login.headers["location"] == "/setup"
    form = await browser.get("/setup")
    assert "Create the admin account" in form.text
    assert form.headers["content-type"].startswith("text/html")
    token = csrf_from(form.text)
    refused = await browser.post(
        "/setup", data={"username": "root", "password": PASSWORD, "password2": PASSWORD}
    )
    assert refused.status_code == 403, "no CSRF token, no account"
    mismatch = await browser.post(
        "/setup",
        data={"username": "root", "password": PASSWORD, "password2": "other", "_csrf_token": token},
    )
    assert mismatch.status_code == 400 and "differ" in mismatch.text
    created = await browser.post(
        "/setup",
        data={
            "username": "root",
            "password": PASSWORD,
            "password2": PASSWORD,
            "_csrf_token": token,
        },
    )
    assert created.status_code == 303 and "webapp_session" in created.headers["set-cookie"]
    assert "HttpOnly" in created.headers["set-cookie"]
    page = await browser.get("/", follow_redirects=True)
    assert page.status_code == 200 and 'id="composer"' in page.text
    assert "Trimmed conversations" in page.text, "the first account is the admin"
    again = await browser.get("/setup")
    assert again.status_code == 303 and again.headers["location"] == "/login"


async def test_sign_in_out_and_wrong_passwords(browser: AsyncTestClient, database_url: str) -> None:
    await make_user(database_url, "alice")
    page = await browser.get("/login")
    wrong = await browser.post(
        "/login",
        data={"username": "alice", "password": "nope-nope", "_csrf_token": csrf_from(page.text)},
    )
    assert wrong.status_code == 400 and "Wrong username or password" in wrong.text
    csrf = await sign_in(browser, "alice")
    out = await browser.post("/logout", data={"_csrf_token": csrf})
    assert out.status_code == 303
    assert (await browser.get("/")).status_code == 303


async def test_every_api_route_needs_auth(app: Litestar) -> None:
    async with Client(app=app) as anonymous:
        for method, url in [
            ("GET", "/api/conversations"),
            ("POST", "/api/conversations"),
            ("GET", "/api/conversations/x"),
            ("PATCH", "/api/conversations/x"),
            ("DELETE", "/api/conversations/x"),
            ("POST", "/api/conversations/x/messages"),
            ("POST", "/api/conversations/x/stop"),
            ("GET", "/api/configurations"),
            ("GET", "/api/admin/trimmed"),
            ("GET", "/schema/openapi.json"),
        ]:
            response = await anonymous.request(method, url, json={} if method != "GET" else None)
            assert response.status_code == 401, (method, url, response.status_code)
        bad = await anonymous.get(
            "/api/conversations", headers={"Authorization": "Bearer wa_not-a-token"}
        )
        assert bad.status_code == 401 and "token" in bad.json()["detail"]
        assert (await anonymous.get("/healthz")).status_code == 200
        assert (await anonymous.get("/static/app.css")).status_code == 200


async def test_another_users_conversation_is_404_everywhere(
    app: Litestar, database_url: str
) -> None:
    alice = await make_user(database_url, "alice")
    mallory = await make_user(database_url, "mallory")
    async with Client(app=app) as client:
        as_alice = bearer_header(alice)
        as_mallory = bearer_header(mallory)
        created = await client.post("/api/conversations", json={}, headers=as_alice)
        cid = created.json()["id"]
        await client.post(
            f"/api/conversations/{cid}/messages", json={"content": "secret"}, headers=as_alice
        )
        for method, url, body in [
            ("GET", f"/api/conversations/{cid}", None),
            ("PATCH", f"/api/conversations/{cid}", {"title": "mine"}),
            ("POST", f"/api/conversations/{cid}/messages", {"content": "hi"}),
            ("POST", f"/api/conversations/{cid}/stop", None),
            ("DELETE", f"/api/conversations/{cid}", None),
        ]:
            response = await client.request(method, url, json=body, headers=as_mallory)
            assert response.status_code == 404, (method, url)
            assert "secret" not in response.text
        assert (await client.get("/api/conversations", headers=as_mallory)).json() == []
        still = await client.get(f"/api/conversations/{cid}", headers=as_alice)
        assert still.status_code == 200 and still.json()["messages"][0]["content"] == "secret"


async def test_html_pages_hide_other_users_conversations(app: Litestar, database_url: str) -> None:
    alice = await make_user(database_url, "alice")
    await make_user(database_url, "mallory")
    async with Client(app=app) as client:
        created = await client.post("/api/conversations", json={}, headers=bearer_header(alice))
        cid = created.json()["id"]
        await sign_in(client, "mallory")
        for url in (f"/c/{cid}", f"/c/{cid}/older?before=5", f"/c/{cid}/answers/2/stream"):
            assert (await client.get(url)).status_code == 404, url


async def test_cookie_sessions_need_the_csrf_token(
    browser: AsyncTestClient, database_url: str
) -> None:
    await make_user(database_url, "alice")
    csrf = await sign_in(browser, "alice")
    refused = await browser.post("/api/conversations", json={})
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    wrong = await browser.post("/api/conversations", json={}, headers={"x-csrftoken": "0" * 64})
    assert wrong.status_code == 403
    made = await browser.post("/api/conversations", json={}, headers={"x-csrftoken": csrf})
    assert made.status_code == 201
    cid = made.json()["id"]
    no_token_form = await browser.post(f"/c/{cid}/send", data={"content": "hi"})
    assert no_token_form.status_code == 403
    sent = await browser.post(
        f"/c/{cid}/send",
        data={"content": "hi"},
        headers={"x-csrftoken": csrf, "hx-request": "true"},
    )
    assert sent.status_code == 200 and 'data-role="user"' in sent.text


async def test_a_token_client_gets_no_cookie_and_a_made_up_token_gets_past_no_csrf_check(
    app: Litestar, database_url: str
) -> None:
    """An API client has no cookie jar to protect: no anchor is made for it. A bearer
    header alone proves nothing, so where no sign-in is checked the CSRF guard still
    refuses a request without its token."""
    token = await make_user(database_url, "alice")
    async with Client(app=app) as client:
        made = await client.post("/api/conversations", json={}, headers=bearer_header(token))
        assert made.status_code == 201 and "set-cookie" not in made.headers
        forged = await client.post(
            "/login",
            data={"username": "alice", "password": "anything"},
            headers={"Authorization": "Bearer wa_made-up"},
        )
        assert forged.status_code == 403 and "CSRF" in forged.text
        page = await client.get("/login")  # without a token: a browser, given its anchor
        assert "webapp_csrf=" in page.headers["set-cookie"]


async def test_admin_pages_are_for_admins(app: Litestar, database_url: str) -> None:
    admin = await make_user(database_url, "root", admin=True)
    user = await make_user(database_url, "alice")
    async with Client(app=app) as client:
        for url in ("/api/admin/trimmed", "/admin/trimmed", "/admin/trimmed.csv"):
            denied = await client.get(url, headers=bearer_header(user))
            assert denied.status_code == 403, url
            allowed = await client.get(url, headers=bearer_header(admin))
            assert allowed.status_code == 200, url


async def test_every_response_carries_the_security_headers(
    app: Litestar, database_url: str
) -> None:
    token = await make_user(database_url, "alice")
    async with Client(app=app) as client:
        for url in ("/login", "/healthz", "/static/app.css", "/api/conversations"):
            response = await client.get(url, headers=bearer_header(token))
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, url
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["referrer-policy"]


async def test_the_embed_is_framed_only_by_its_origins_and_visitors_are_apart(
    app: Litestar,
) -> None:
    # One client, two visitors: each visitor is just a cookie jar (one app, one event loop).
    async with Client(app=app, base_url="https://chat.test") as client:
        page = await client.get("/embed/support")
        assert page.status_code == 200 and "Hi! How can we help?" in page.text
        csp = page.headers["content-security-policy"]
        assert "frame-ancestors https://shop.example.com http://127.0.0.1:8799" in csp
        assert "x-frame-options" not in page.headers
        cookie = page.headers["set-cookie"]
        assert "webapp_visitor=" in cookie and "SameSite=None" in cookie and "Secure" in cookie
        assert "Partitioned" in cookie, "CHIPS: kept where third-party cookies are blocked"
        assert (await client.get("/embed/nope")).status_code == 404
        token = found(r'"x-csrftoken": "([0-9a-f]+)"', page.text)
        sent = await client.post(
            "/embed/support/send", data={"content": "my order 1234"}, headers={"x-csrftoken": token}
        )
        assert sent.status_code == 200
        again = await client.get("/embed/support")
        assert "my order 1234" in again.text, "a reload keeps the visitor's conversation"
        answer_id = found(r'data-role="assistant" data-message-id="(\d+)"', sent.text)
        first_visitor = dict(client.cookies)
        client.cookies.clear()
        other = await client.get("/embed/support")
        assert "my order 1234" not in other.text, "another visitor sees nothing of it"
        peek = await client.get(f"/embed/support/answers/{answer_id}/stream")
        assert peek.status_code == 404
        assert first_visitor["webapp_visitor"] != client.cookies["webapp_visitor"]


async def test_sends_past_the_rate_limit_get_429_with_retry_after(
    app: Litestar, database_url: str
) -> None:
    token = await make_user(database_url, "alice")
    async with Client(app=app) as client:
        headers = bearer_header(token)
        cid = (await client.post("/api/conversations", json={}, headers=headers)).json()["id"]
        for index in range(3):
            ok = await client.post(
                f"/api/conversations/{cid}/messages", json={"content": f"m{index}"}, headers=headers
            )
            assert ok.status_code == 201
        refused = await client.post(
            f"/api/conversations/{cid}/messages", json={"content": "more"}, headers=headers
        )
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert "try again in" in refused.json()["detail"]
        stored = (await client.get(f"/api/conversations/{cid}", headers=headers)).json()
        assert len(stored["messages"]) == 6


async def test_api_tokens_are_shown_once_and_can_be_revoked(
    browser: AsyncTestClient, database_url: str
) -> None:
    await make_user(database_url, "alice")
    csrf = await sign_in(browser, "alice")
    page = await browser.post("/settings/tokens", data={"name": "backup", "_csrf_token": csrf})
    token = found(r"data-new-token>(wa_[\w-]+)<", page.text)
    assert (await browser.get("/settings")).text.count(token) == 0, "shown once"
    auth = bearer_header(token)
    assert (await browser.get("/api/conversations", headers=auth)).status_code == 200
    token_id = found(r"/settings/tokens/(\d+)/revoke", page.text)
    revoked = await browser.post(f"/settings/tokens/{token_id}/revoke", data={"_csrf_token": csrf})
    assert revoked.status_code == 303
    assert (await browser.get("/api/conversations", headers=auth)).status_code == 401


async def test_the_sign_in_page_says_when_a_throttled_username_may_try_again(
    browser: AsyncTestClient, database_url: str
) -> None:
    await make_user(database_url, "alice")
    page = await browser.get("/login")
    token = csrf_from(page.text)
    for _ in range(5):
        wrong = await browser.post(
            "/login", data={"username": "alice", "password": "nope", "_csrf_token": token}
        )
        assert wrong.status_code == 400 and "Wrong username or password." in wrong.text
    refused = await browser.post(
        "/login", data={"username": "alice", "password": PASSWORD, "_csrf_token": token}
    )
    assert refused.status_code == 429
    assert refused.headers["content-type"].startswith("text/html")
    assert 0 < int(refused.headers["retry-after"]) <= 900
    assert "Too many failed sign-ins for this username; try again in 15 minutes." in refused.text
    assert "webapp_session" not in refused.headers.get("set-cookie", "")
