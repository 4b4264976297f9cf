"""Findings of the attack run (issue 9) through the real app, on SQLite and PostgreSQL:
CSRF exemptions, caching of private responses, password rules."""

from __future__ import annotations

import re

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import EMBED, PASSWORD, Client, bearer_header, csrf_from, make_user, sign_in
from webapp.accounts.passwords import check_password
from webapp.errors import InvalidInput

pytestmark = pytest.mark.settings(extra=EMBED, rate_limit_messages=3)

JUNK_BEARER = {"Authorization": "Bearer x"}


async def test_a_junk_bearer_header_does_not_skip_the_csrf_check(
    browser: AsyncTestClient,
    database_url: str,
) -> None:
    """Only a token the app accepted exempts a request from CSRF; on routes that need no
    sign-in nothing validates the header, so it must exempt nothing."""
    await make_user(database_url, "alice")
    await sign_in(browser, "alice")
    logout = await browser.post("/logout", headers=JUNK_BEARER)
    assert logout.status_code == 403, "a forged sign-out is refused"
    assert (await browser.get("/settings")).status_code == 200, "still signed in"
    login = await browser.post(
        "/login",
        data={"username": "alice", "password": PASSWORD},
        headers=JUNK_BEARER,
    )
    assert login.status_code == 403


async def test_a_junk_bearer_header_does_not_skip_the_embeds_csrf_check(app: Litestar) -> None:
    async with Client(app=app, base_url="https://chat.test") as visitor:
        page = await visitor.get("/embed/support")
        refused = await visitor.post(
            "/embed/support/send", data={"content": "hello"}, headers=JUNK_BEARER
        )
        assert refused.status_code == 403
        token = re.search(r'"x-csrftoken": "([0-9a-f]+)"', page.text)
        assert token is not None
        sent = await visitor.post(
            "/embed/support/send", data={"content": "hello"}, headers={"x-csrftoken": token[1]}
        )
        assert sent.status_code == 200, "the same send with its CSRF token goes through"


async def test_a_valid_token_still_needs_no_csrf_token(app: Litestar, database_url: str) -> None:
    token = await make_user(database_url, "alice")
    async with Client(app=app) as client:
        created = await client.post("/api/conversations", json={}, headers=bearer_header(token))
        assert created.status_code == 201


async def test_private_responses_are_never_cached(
    browser: AsyncTestClient,
    database_url: str,
) -> None:
    await make_user(database_url, "alice")
    await sign_in(browser, "alice")
    for path in ("/", "/settings", "/api/conversations", "/login", "/embed/support"):
        response = await browser.get(path, follow_redirects=True)
        assert response.status_code == 200, path
        assert response.headers.get("cache-control") == "no-store", path
    static = await browser.get("/static/app.css")
    assert static.status_code == 200 and static.headers.get("cache-control") != "no-store"


@pytest.mark.parametrize("password", [" " * 8, " " * 20, "\t" * 9, " abc    "])
def test_a_password_of_spaces_is_refused(password: str) -> None:
    with pytest.raises(InvalidInput, match="not counting spaces"):
        check_password(password)


def test_a_password_with_inner_spaces_is_fine() -> None:
    check_password("correct horse battery")


async def test_the_setup_page_refuses_a_password_of_spaces(
    browser: AsyncTestClient,
) -> None:
    form = await browser.get("/setup")
    token = csrf_from(form.text)
    refused = await browser.post(
        "/setup",
        data={"username": "root", "password": " " * 8, "password2": " " * 8, "_csrf_token": token},
    )
    assert refused.status_code == 400
    assert re.search(r"at least 8 characters", refused.text)


async def test_the_csrf_token_is_bound_to_the_session(
    browser: AsyncTestClient,
    database_url: str,
) -> None:
    await make_user(database_url, "alice")
    before = csrf_from((await browser.get("/login")).text)
    after = await sign_in(browser, "alice")
    assert after != before, "signing in gives a new CSRF token"
    stale = await browser.post("/settings/tokens", data={"name": "x", "_csrf_token": before})
    assert stale.status_code == 403, "the token from before sign-in no longer works"
    fresh = await browser.post("/settings/tokens", data={"name": "x", "_csrf_token": after})
    assert fresh.status_code == 200
    # Another anchor cookie (tossed in by a sibling site, say) changes nothing once signed in.
    browser.cookies.set("webapp_csrf", "attacker-known", domain="testserver.local")
    home = await browser.get("/", follow_redirects=True)
    assert csrf_from(home.text) == after


async def test_a_client_chosen_anchor_is_replaced(app: Litestar) -> None:
    async with Client(app=app, base_url="https://chat.test") as client:
        client.cookies.set("webapp_csrf", "chosen", domain="chat.test")
        page = await client.get("/login")
        cookie = page.headers["set-cookie"]
        assert cookie.startswith("webapp_csrf=") and "chosen" not in cookie
        assert "Secure" in cookie, "over https the anchor is Secure"
        again = await client.get("/login")
        assert "set-cookie" not in again.headers, "the server's own anchor is kept"


async def test_signing_in_rotates_the_anchor(
    browser: AsyncTestClient,
    database_url: str,
) -> None:
    await make_user(database_url, "alice")
    page = await browser.get("/login")
    anchor = browser.cookies["webapp_csrf"]
    signed_in = await browser.post(
        "/login",
        data={
            "username": "alice",
            "password": PASSWORD,
            "_csrf_token": csrf_from(page.text),
        },
    )
    assert signed_in.status_code == 303
    assert browser.cookies["webapp_csrf"] != anchor
