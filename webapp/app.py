"""create_app(settings) -> Litestar: every piece of the app is wired here, and only here."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import urlencode

from litestar import Litestar, MediaType, Request, Response, get
from litestar.di import Provide
from litestar.exceptions import HTTPException, NotAuthorizedException, ValidationException
from litestar.exceptions.responses import create_exception_response
from litestar.middleware import DefineMiddleware
from litestar.openapi.config import OpenAPIConfig
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from sqlalchemy import text
from sqlmodel import Session

from webapp.accounts.passwords import configured_hasher
from webapp.accounts.preferences import theme_for
from webapp.accounts.service import AccountService
from webapp.accounts.users_web import UserAdminApi, UserPages
from webapp.accounts.web import AccountPages, SessionOrTokenAuth, owner_of
from webapp.admin.web import AdminController
from webapp.chat.answering.answer import AnswerRegistry
from webapp.chat.answering.approvals import Approvals
from webapp.chat.answering.notify import answer_notices
from webapp.chat.answering.reaping import Liveness, reap_at_start
from webapp.chat.files.service import FileStore
from webapp.chat.files.web import files_router
from webapp.chat.jobs import chat_jobs
from webapp.chat.stored.attachments import PAPERCLIP
from webapp.chat.stored.organising import kind_mark
from webapp.chat.stored.titles import split_mark
from webapp.chat.web.api import ConversationController, TurnController, search
from webapp.chat.web.deps import Chat
from webapp.chat.web.organise_pages import OrganisePages
from webapp.chat.web.pages import ConversationAdmin, ConversationPages
from webapp.chat.web.preset_pages import PresetPages
from webapp.chat.web.presets import PresetController
from webapp.chat.web.sharing import ShareApi, SharePages
from webapp.db import Database
from webapp.embed.files import embed_files_router
from webapp.embed.pages import EmbedPages, frame_ancestors
from webapp.embed.quota import EmbedQuota
from webapp.errors import AppError, TooManyRequests
from webapp.gateway import gateway_router
from webapp.gateway.errors import GATEWAY_PREFIX, gateway_exception_handler
from webapp.llm.affinity import CacheKeys
from webapp.llm.calibration import Calibrator
from webapp.llm.describe import configuration_dicts
from webapp.llm.discovery import discover
from webapp.llm.manager import LLMManager
from webapp.llm.providers.base import Provider
from webapp.llm.tokenizers import Tokenizers
from webapp.settings import Settings
from webapp.web.forms import StrictFormRequest
from webapp.web.security import CSRFAnchorMiddleware, csrf_guard, security_headers
from webapp.web.templates import STATIC, environment, template_config

environment.globals.update(paperclip=PAPERCLIP, theme_for=theme_for)
environment.filters["title_parts"] = split_mark
environment.filters["kind_mark"] = kind_mark

log = logging.getLogger(__name__)

API_PATHS = ("/api/", "/schema")
"""Answered in JSON, and with 401 rather than a redirect to the sign-in page."""
PUBLIC_PATHS = ["^/static/", "^/healthz$", "^/favicon.ico$"]
"""Served without signing in (besides the routes marked exclude_from_auth: login, setup,
the embed widget)."""


def error_response(request: Request[Any, Any, Any], status_code: int, detail: str) -> Response[Any]:
    """JSON for the API; an inline fragment for htmx; a page for a browser."""
    if request.url.path.startswith(API_PATHS) or "application/json" in request.headers.get(
        "accept", ""
    ):
        return Response(
            {"status_code": status_code, "detail": detail},
            status_code=status_code,
            media_type=MediaType.JSON,
        )
    name = "_error.html" if request.headers.get("hx-request") == "true" else "error.html"
    return Template(
        name, context={"status_code": status_code, "detail": detail}, status_code=status_code
    )


def app_error(request: Request[Any, Any, Any], error: AppError) -> Response[Any]:
    if request.url.path.startswith(GATEWAY_PREFIX):
        return gateway_exception_handler(request, error)
    response = error_response(request, error.status_code, error.message)
    if isinstance(error, TooManyRequests):
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def too_deep(request: Request[Any, Any, Any], error: RecursionError) -> Response[Any]:
    """JSON nested deeper than the decoder's recursion limit (msgspec raises RecursionError,
    not a decode error): the client's input is at fault, so a 400, never a 500."""
    log.warning("refused a request nested too deeply: %s %s", request.method, request.url.path)
    if request.url.path.startswith(GATEWAY_PREFIX):
        return gateway_exception_handler(request, error)
    return error_response(request, 400, "invalid request: the body is nested too deeply")


def bad_encoding(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    """A form field whose bytes its charset cannot read (UnicodeDecodeError), or a charset
    no codec has (a LookupError of the codec registry): the client's input, a 400. Other
    LookupErrors (KeyError, IndexError) are the app's own: the usual 500."""
    if request.url.path.startswith(GATEWAY_PREFIX):
        return gateway_exception_handler(request, error)
    if isinstance(error, LookupError) and type(error) is not LookupError:
        return create_exception_response(request, error)
    log.warning("refused undecodable text: %s %s: %s", request.method, request.url.path, error)
    return error_response(request, 400, "invalid request: text that is not valid in its encoding")


def http_error(request: Request[Any, Any, Any], error: HTTPException) -> Response[Any]:
    if request.url.path.startswith(GATEWAY_PREFIX):
        # Under /v1, also what matches no route (404, 405) answers in OpenAI's shape.
        return gateway_exception_handler(request, error)
    if isinstance(error, NotAuthorizedException) and not request.url.path.startswith(API_PATHS):
        return sign_in_first(request)
    detail = error.detail
    if isinstance(error, ValidationException):
        detail = (
            "invalid request: "
            + "; ".join(
                str(item.get("message", item))
                for item in (error.extra or [])
                if isinstance(item, dict)
            )
            if error.extra
            else detail
        )
    response = error_response(request, error.status_code, detail)
    if error.headers:
        response.headers.update(error.headers)
    return response


def sign_in_first(request: Request[Any, Any, Any]) -> Response[Any]:
    """A browser without a session goes to the sign-in page (or to first-run setup)."""
    target = "/login?" + urlencode({"next": request.url.path})
    if request.headers.get("hx-request") == "true":
        return Response(content=b"", status_code=401, headers={"HX-Redirect": target})
    return Redirect(target, status_code=303)


@get("/favicon.ico", exclude_from_auth=True, include_in_schema=False)
async def favicon() -> Redirect:
    """Browsers ask for /favicon.ico whatever the page links: send them to the icon."""
    return Redirect("/static/icon.svg", status_code=301)


def _ping(session: Session) -> None:
    session.connection().execute(text("SELECT 1"))


@get("/healthz", tags=["health"], exclude_from_auth=True)
async def healthz(chat: Chat) -> dict[str, str]:
    await chat.db.read(_ping)
    return {"status": "ok"}


@get("/api/configurations", tags=["configurations"])
async def list_configurations(chat: Chat) -> list[dict[str, Any]]:
    return configuration_dicts(chat.catalog)


def create_app(
    settings: Settings | None = None, *, providers: dict[str, Provider] | None = None
) -> Litestar:
    """Build the app. `providers` replaces the clients built from the catalog, by name."""
    settings = settings or Settings()
    catalog = settings.catalog
    db = Database(settings.database_url)
    calibrator = Calibrator(db)
    tokenizers = Tokenizers()
    manager = LLMManager(
        catalog,
        calibrator,
        providers,
        tokenizers,
        transport_kind=settings.provider_transport,
        keys=CacheKeys(settings.secret_key),
    )
    embed_quota = EmbedQuota(
        per_client=settings.embed_rate_limit_messages,
        per_embed=settings.embed_rate_limit_total,
        window=timedelta(seconds=settings.rate_limit_window),
    )
    files = FileStore(db, settings)
    answers = AnswerRegistry()
    approvals = Approvals()
    # How this process hears of answers and titles other workers write (and of stops and
    # tool call decisions for its own answers).
    notices = answer_notices(
        settings.database_url,
        db,
        settings.stream_flush_interval,
        on_stop=answers.request_stop,
        on_approve=approvals.heard,
    )
    chat = chat_jobs(
        db, manager, settings, answers, notices, quotas=(embed_quota,), approvals=approvals
    )
    accounts = AccountService(
        db,
        failures_allowed=settings.sign_in_failures_allowed,
        failure_window=timedelta(seconds=settings.sign_in_failure_window),
        hasher=configured_hasher(settings.password_hashing),
    )
    if settings.password_hashing != "standard":
        log.warning("WEBAPP_PASSWORD_HASHING=%s: fit for tests only", settings.password_hashing)
    liveness = Liveness(settings.database_url)

    async def start() -> None:
        # Windows and tokenizers come from the engines themselves, asked once per start
        # (bounded in time; an engine that is down is estimated and assumed 8,192).
        manager.catalog, _ = await discover(catalog)
        await tokenizers.probe(manager.catalog)
        await calibrator.load()
        await notices.start()
        await accounts.purge_expired_sessions()
        # All the answers still streaming if no other process holds the database, else
        # only the quiet ones (webapp.chat.answering.reaping); the lease is held until shutdown.
        reaped = await reap_at_start(db, liveness, settings.stale_stream_after)
        if reaped:
            log.warning("marked %d answers interrupted: their writer stopped", reaped)

    async def stop() -> None:
        await chat.shutdown()
        await notices.stop()
        await liveness.stop()
        await manager.aclose()
        await tokenizers.aclose()
        await db.dispose()

    app = Litestar(
        route_handlers=[
            healthz,
            favicon,
            list_configurations,
            ConversationController,
            TurnController,
            PresetController,
            PresetPages,
            files_router(settings.max_file_bytes),
            search,
            ConversationAdmin,
            ConversationPages,
            EmbedPages,
            embed_files_router(settings.max_file_bytes),
            ShareApi,
            SharePages,
            OrganisePages,
            AccountPages,
            UserPages,
            UserAdminApi,
            AdminController,
            gateway_router(db, settings, accounts, chat.admission),
            create_static_files_router(path="/static", directories=[STATIC]),
        ],
        template_config=template_config(),
        dependencies={
            "chat": Provide(lambda: chat, sync_to_thread=False),
            "files": Provide(lambda: files, sync_to_thread=False),
            "notices": Provide(lambda: notices, sync_to_thread=False),
            "owner": Provide(owner_of, sync_to_thread=False),
            "accounts": Provide(lambda: accounts, sync_to_thread=False),
            "settings": Provide(lambda: settings, sync_to_thread=False),
            "catalog": Provide(lambda: manager.catalog, sync_to_thread=False),
        },
        exception_handlers={
            AppError: app_error,
            HTTPException: http_error,
            RecursionError: too_deep,
            UnicodeDecodeError: bad_encoding,
            LookupError: bad_encoding,
        },
        middleware=[
            DefineMiddleware(CSRFAnchorMiddleware, secret_key=settings.secret_key),
            # The gateway authenticates by bearer token alone (webapp.gateway.auth).
            DefineMiddleware(
                SessionOrTokenAuth, accounts=accounts, exclude=[*PUBLIC_PATHS, "^/v1/"]
            ),
        ],
        guards=[csrf_guard],
        request_class=StrictFormRequest,
        before_send=[security_headers(partial(frame_ancestors, catalog))],
        on_startup=[start],
        on_shutdown=[stop],
        openapi_config=OpenAPIConfig(title="webapp", version="0.1.0", path="/schema"),
    )
    # For scripts that drive an app in process (bench/): no handler reads it.
    app.state.chat = chat
    return app
