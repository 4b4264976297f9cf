"""What the tests build, in one place: settings, apps and the conversation service, users
and their sign-in, and the small readers of what the app answers.

Plain functions and classes only: the fixtures built on them live in the conftest.py
files, each defined once, so a test module takes them by name and imports no other test
module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException
from litestar.testing import AsyncTestClient
from litestar.types import ASGIApp, Receive, Scope, Send
from sqlalchemy import insert
from sqlmodel import Session, col

from tests.catalogs import Upstream, write_upstream_catalog
from tests.dbutil import session_on
from webapp.accounts.models import ADMIN, DEFAULT_SCOPES, User
from webapp.accounts.service import AccountService
from webapp.accounts.web import owner_of
from webapp.admin.web import AdminController
from webapp.app import app_error, http_error
from webapp.chat.jobs import ChatJobs, chat_jobs
from webapp.chat.stored.models import MESSAGE_DEFAULTS, Conversation, Message, Role, Status
from webapp.db import Database
from webapp.errors import AppError
from webapp.llm.calibration import Calibrator
from webapp.llm.manager import Finished, Fitted, LLMManager, StreamEvent
from webapp.llm.window import Transcript
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import utcnow
from webapp.web.templates import template_config

# ---- settings --------------------------------------------------------------------------------

EMBED = """
[[embeds]]
name = "support"
configuration = "small"
allowed_origins = ["https://shop.example.com", "http://127.0.0.1:8799"]
title = "Ask us"
greeting = "Hi! How can we help?"
"""
"""An embed of the `small` configuration, for the catalogs of the embed and security tests."""

SERVICE: dict[str, Any] = {"stream_flush_interval": 0.05, "max_message_chars": 5000}
"""The service tests' settings: quick flushes, room for long messages."""


def settings_for(
    database_url: str, tmp_path: Path, upstream: Upstream, extra: str = "", **fields: Any
) -> Settings:
    """Settings on the fake upstream's catalog (`extra` adds catalog entries), with `fields`
    set (the `settings` marker of a test module gives both to the `settings` fixture)."""
    return Settings(
        database_url=database_url,
        config=write_upstream_catalog(tmp_path / "catalog.toml", upstream, extra),
        **fields,
    )


def service_settings(
    database_url: str, tmp_path: Path, upstream: Upstream, extra: str = ""
) -> Settings:
    """The service tests' settings; `extra` adds catalog entries."""
    return settings_for(database_url, tmp_path, upstream, extra, **SERVICE)


# ---- the conversation service ----------------------------------------------------------------

OWNER = "alice"
"""Who owns the conversations of the service tests."""


async def build_service(settings: Settings) -> ChatJobs:
    db = Database(settings.database_url)
    calibrator = Calibrator(db)
    await calibrator.load()
    return chat_jobs(db, LLMManager(settings.catalog, calibrator), settings)


async def close_service(service: ChatJobs) -> None:
    await service.shutdown()
    await service.manager.aclose()
    await service.db.dispose()


async def say(chat: ChatJobs, conversation_id: str, text: str) -> tuple[Message, Message]:
    send = await chat.sender.send(OWNER, conversation_id, text)
    return await chat.sender.settle(send)


# ---- users -----------------------------------------------------------------------------------

PASSWORD = "correct horse battery"
"""Every test user's password."""


async def make_user(database_url: str, name: str, *, admin: bool = False) -> str:
    """A user and an API token for them, made outside the app (the test client runs the
    app on its own event loop, and database connections belong to one loop)."""
    engine = Database(database_url)
    try:
        accounts = AccountService(engine)
        user = await accounts.create_user(name, PASSWORD, is_admin=admin)
        scopes = [*DEFAULT_SCOPES, ADMIN] if admin else DEFAULT_SCOPES
        _, token = await accounts.create_token(id_of(user), "tests", scopes)
        return token
    finally:
        await engine.dispose()


async def add_user(chat: ChatJobs, name: str, *, admin: bool = False) -> User:
    """A user row written straight to the service's database (no password to sign in with)."""
    user = User(username=name, username_key=name.lower(), password_hash="x", is_admin=admin)
    async with session_on(chat.db, begin=True) as session:
        session.add(user)
    return user


# ---- browsers: pages, forms and signing in ---------------------------------------------------


class Client(AsyncTestClient):
    """A test client that shows redirects instead of following them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.follow_redirects = False


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


# ---- the admin controller on its own ---------------------------------------------------------


def user_from_header(users: dict[bytes, User]) -> Callable[[ASGIApp], ASGIApp]:
    """Stands in for the real authentication: `x-test-user` names who is asking."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def call(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == ScopeType.HTTP:
                who = dict(scope["headers"]).get(b"x-test-user", b"")
                scope["user"] = users.get(who)
            await app(scope, receive, send)

        return call

    return middleware


@asynccontextmanager
async def admin_client(
    settings: Settings, users: dict[str, User]
) -> AsyncIterator[AsyncTestClient]:
    """The controller in a small app, as app.py will mount it, with `x-test-user` naming
    who asks. The test client serves the app on an event loop of its own, so the app gets
    its own service (and database pool)."""

    async def start(app: Litestar) -> None:
        app.state.chat = await build_service(settings)

    async def stop(app: Litestar) -> None:
        chat: ChatJobs = app.state.chat
        await chat.manager.aclose()
        await chat.db.dispose()

    def chat(state: State) -> ChatJobs:
        return state.chat

    app = Litestar(
        route_handlers=[AdminController],
        template_config=template_config(),
        # As in the real app: `owner` (who is asking) is an app-wide dependency.
        dependencies={
            "chat": Provide(chat, sync_to_thread=False),
            "owner": Provide(owner_of, sync_to_thread=False),
        },
        middleware=[user_from_header({name.encode(): user for name, user in users.items()})],
        exception_handlers={AppError: app_error, HTTPException: http_error},
        on_startup=[start],
        on_shutdown=[stop],
    )
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


# ---- the model manager -----------------------------------------------------------------------


def long_transcript(turns: int, words: int = 30) -> Transcript:
    """A system prompt and `turns` exchanges of about `words` words each, then a question."""
    messages = [{"role": "system", "content": "You are terse."}]
    for index in range(turns):
        messages.append({"role": "user", "content": f"question {index}: " + "lorem " * words})
        messages.append({"role": "assistant", "content": f"answer {index}: " + "ipsum " * words})
    messages.append({"role": "user", "content": "What was the first question?"})
    return Transcript(messages)


async def collect(
    manager: LLMManager, configuration: str, transcript: Transcript, **kw: Any
) -> list[StreamEvent]:
    """Every fit in the order it was made (the plan's first), then what the stream said."""
    plan = manager.plan(manager.route(configuration), transcript, **kw)
    return [Fitted(plan.fit)] + [event async for event in manager.stream(plan)]


def finished(events: list[StreamEvent]) -> Finished:
    """How a stream ended: its last event, which must say so."""
    assert isinstance(events[-1], Finished), events[-1]
    return events[-1]


# ---- rows ------------------------------------------------------------------------------------


def writing_answers(session: Session, count: int) -> list[int]:
    """A conversation with `count` answers being written; their ids."""
    connection = session.connection()
    conversation = Conversation(owner="embed:flush:visitor", configuration="demo", title="t")
    connection.execute(
        insert(Conversation).values(
            {**conversation.model_dump(), "embed_name": "flush", "visitor": "visitor"}
        )
    )
    now = utcnow()
    rows = [
        {
            **MESSAGE_DEFAULTS,
            "conversation_id": conversation.id,
            "seq": seq,
            "role": Role.ASSISTANT,
            "status": Status.STREAMING,
            "created_at": now,
            "updated_at": now,
        }
        for seq in range(1, count + 1)
    ]
    result = connection.execute(insert(Message).returning(col(Message.id)), rows)
    return sorted(id_of_inserted for id_of_inserted in result.scalars().all() if id_of_inserted)


# ---- the command line ------------------------------------------------------------------------

WEBAPP = [sys.executable, "-m", "webapp.cli"]
"""The `webapp` command, run by this interpreter."""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`webapp *args` in a child process, with `env` added to this one's environment."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [*WEBAPP, *args], capture_output=True, text=True, env=environment, timeout=60
    )
