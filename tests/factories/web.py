"""The app in a test client, and what a browser or an API client reads of its answers:
pages, forms, signing in, event streams."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories.users import PASSWORD, make_user
from webapp.app import create_app
from webapp.settings import Settings


class Client(AsyncTestClient):
    """A test client that shows redirects instead of following them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.follow_redirects = False


@asynccontextmanager
async def api_client(
    settings: Settings, user: str = "alice", *, admin: bool = False, app: Litestar | None = None
) -> AsyncIterator[AsyncTestClient]:
    """`user`'s API client (made with make_user, their token on every request) of the app on
    `settings`, or of `app` when the test has built it already."""
    token = await make_user(settings.database_url, user, admin=admin)
    async with AsyncTestClient(app=app or create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


# ---- pages and forms -------------------------------------------------------------------------


def found(pattern: str | re.Pattern[str], text: str) -> str:
    """The first group of `pattern`'s first match in `text`; failing if there is none."""
    match = re.search(pattern, text)
    assert match is not None, f"{pattern!r} is not in the page"
    return match.group(1)


def csrf_from(html: str) -> str:
    match = re.search(r'name="_csrf_token" value="([0-9a-f]+)"', html)
    assert match, "the page carries a CSRF token"
    return match.group(1)


def htmx_headers(html: str) -> dict[str, str]:
    """What htmx sends on every request of the page (`hx-headers:inherited` on body)."""
    match = re.search(r"<body hx-headers:inherited='([^']*)'>", html)
    assert match, "the page carries its headers for htmx"
    return json.loads(match.group(1))


async def sign_in(client: AsyncTestClient, username: str) -> str:
    """Signs `username` in through the login form; the CSRF token of the page it lands on."""
    page = await client.get("/login")
    assert page.headers["content-type"].startswith("text/html")
    response = await client.post(
        "/login",
        data={"username": username, "password": PASSWORD, "_csrf_token": csrf_from(page.text)},
    )
    assert response.status_code == 303, response.text
    home = await client.get("/", follow_redirects=True)
    return csrf_from(home.text)


# ---- the JSON API ----------------------------------------------------------------------------


def parse_sse(body: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """(event, data, id) of each event of a whole SSE body whose data is JSON."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        name, data, event_id = "message", [], None
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line.startswith("id:"):
                event_id = line[3:].strip()
        if data:
            events.append((name, json.loads("\n".join(data)), event_id))
    return events


async def new_conversation(client: AsyncTestClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/api/conversations", json=body or {"configuration": "small"})
    assert response.status_code == 201, response.text
    return response.json()
