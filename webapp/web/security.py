"""CSRF protection and the security headers every response carries.

CSRF uses a synchronizer token derived from a cookie: the token is an HMAC of a
random per-browser "anchor" cookie under the app's secret key. It needs no
server-side state, survives several workers, and works inside a cross-site
iframe, where the embed's visitor cookie is the anchor (a double-submit cookie
would need JavaScript to read a cookie, which we keep HttpOnly). Requests
authenticated by a bearer token carry no ambient credential, so they need no
CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any

from litestar.connection import ASGIConnection
from litestar.datastructures import MutableScopeHeaders
from litestar.exceptions import PermissionDeniedException
from litestar.handlers import BaseRouteHandler
from litestar.types import ASGIApp, Message, Receive, Scope, Send

ANCHOR_COOKIE = "webapp_csrf"
VISITOR_COOKIE = "webapp_visitor"
CSRF_HEADER = "x-csrftoken"
CSRF_FIELD = "_csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
EMBED_PREFIX = "/embed/"
STATIC_PREFIX = "/static/"


def csrf_token(secret_key: str, anchor: str) -> str:
    return hmac.new(secret_key.encode(), anchor.encode(), hashlib.sha256).hexdigest()


def cookie(request_headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    for key, value in request_headers:
        if key == b"cookie":
            jar = SimpleCookie()
            jar.load(value.decode("latin-1"))
            if name in jar:
                return jar[name].value
    return None


def is_embed(path: str) -> bool:
    return path.startswith(EMBED_PREFIX)


def anchor_cookie_header(name: str, value: str, *, cross_site: bool) -> bytes:
    """The anchor outlives sessions (a year); inside an iframe it must be SameSite=None."""
    same_site = "None; Secure" if cross_site else "Lax"
    return f"{name}={value}; Path=/; Max-Age=31536000; HttpOnly; SameSite={same_site}".encode()


class CSRFAnchorMiddleware:
    """Gives every browser an anchor cookie and puts its CSRF token in `scope["state"]`."""

    def __init__(self, app: ASGIApp, secret_key: str) -> None:
        self.app = app
        self.secret_key = secret_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        embed = is_embed(scope["path"])
        name = VISITOR_COOKIE if embed else ANCHOR_COOKIE
        anchor = cookie(scope["headers"], name)
        fresh = anchor is None or len(anchor) > 128
        if fresh:
            anchor = secrets.token_urlsafe(24)
        state = scope.setdefault("state", {})
        state["csrf_token"] = csrf_token(self.secret_key, anchor)  # type: ignore[arg-type]
        state["anchor"] = anchor

        async def send_with_cookie(message: Message) -> None:
            if fresh and message["type"] == "http.response.start":
                headers = MutableScopeHeaders.from_message(message)
                headers.add(
                    "set-cookie",
                    anchor_cookie_header(name, anchor, cross_site=embed).decode(),  # type: ignore[arg-type]
                )
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    value = connection.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def csrf_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Refuse a state-changing request from a browser that does not carry its CSRF token.

    Only a request the authentication middleware accepted by a valid API token is exempt:
    the mere header (`Bearer x`) proves nothing, and routes that need no sign-in (sign-in,
    sign-out, the embed) never validate one."""
    if connection.scope["method"] in SAFE_METHODS or connection.scope.get("auth") == "token":
        return
    expected = connection.scope["state"].get("csrf_token")
    given = connection.headers.get(CSRF_HEADER)
    content_type = connection.headers.get("content-type", "")
    if not given and content_type.startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        form = await connection.form()  # type: ignore[attr-defined]
        value = form.get(CSRF_FIELD)
        given = value if isinstance(value, str) else None
    if not expected or not given or not hmac.compare_digest(expected, given):
        raise PermissionDeniedException("the CSRF token is missing or wrong; reload the page")


CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors {ancestors}"
)


def security_headers(
    frame_ancestors: Callable[[str], tuple[str, ...] | None],
) -> Callable[[Message, Scope], Any]:
    """A `before_send` hook: strict CSP everywhere; only an embed may be framed, and only
    by the origins its entry allows. `frame_ancestors(path)` answers those origins, or
    None for a page that may not be framed at all."""

    async def before_send(message: Message, scope: Scope) -> None:
        if message["type"] != "http.response.start":
            return
        headers = MutableScopeHeaders.from_message(message)
        allowed = frame_ancestors(scope.get("path", "")) if scope["type"] == "http" else None
        ancestors = " ".join(allowed) if allowed else "'none'"
        headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY.format(ancestors=ancestors)
        if not allowed:
            headers["X-Frame-Options"] = "DENY"
        if "cache-control" not in headers and not scope.get("path", "").startswith(STATIC_PREFIX):
            # Pages and JSON are someone's conversations: no shared cache or back-forward
            # history may keep them. Static files set their own caching.
            headers["Cache-Control"] = "no-store"
        headers["X-Content-Type-Options"] = "nosniff"
        headers["Referrer-Policy"] = "strict-origin-when-cross-origin"
        headers["Cross-Origin-Opener-Policy"] = "same-origin"

    return before_send
