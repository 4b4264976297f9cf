"""The admin controller on its own, in a small app whose `x-test-user` header names who
is asking (no accounts, no sign-in)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException
from litestar.testing import AsyncTestClient
from litestar.types import ASGIApp, Receive, Scope, Send

from tests.factories.service import build_service
from webapp.accounts.models import User
from webapp.accounts.web import owner_of
from webapp.admin.web import AdminController
from webapp.app import app_error, http_error
from webapp.chat.jobs import ChatJobs
from webapp.errors import AppError
from webapp.settings import Settings
from webapp.web.templates import template_config


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
