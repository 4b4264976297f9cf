"""CSRF protection, the embed visitor's identity, and the security headers every response
carries.

CSRF uses a synchronizer token: an HMAC, under the app's secret key, of what identifies
the browser. It needs no server-side state and survives several workers.

- A signed-in browser: its session secret. The token is bound to the session, so it
  changes at every sign-in, and nobody can learn it without the session cookie.
- A browser not signed in (the sign-in and set-up forms): a random "anchor" cookie that
  the server signs. A value the client made up is not signed, so it is replaced.
- An embed visitor: the visitor id. Inside a cross-site iframe most browsers block
  unpartitioned cookies, so the visitor cookie is `Partitioned` (CHIPS), and where even
  that is blocked the widget page carries the signed visitor id, which htmx sends back as
  the `x-webapp-visitor` header on every request: the embed works with no cookie at all.
  A header cannot be sent cross-site without the page's help, and only the frame's own
  page has it.

Requests authenticated by a valid bearer token carry no ambient credential, so they need
no CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Iterable
from typing import Any, cast

from litestar.connection import ASGIConnection, Request
from litestar.datastructures import Cookie, MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.exceptions import PermissionDeniedException
from litestar.handlers import BaseRouteHandler
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from markupsafe import Markup

ANCHOR_COOKIE = "webapp_csrf"
VISITOR_COOKIE = "webapp_visitor"
SESSION_COOKIE = "webapp_session"
VISITOR_HEADER = "x-webapp-visitor"
CSRF_HEADER = "x-csrftoken"
CSRF_FIELD = "_csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
EMBED_PREFIX = "/embed/"
STATIC_PREFIX = "/static/"
MAX_SIGNED_LENGTH = 256
ANCHOR_MAX_AGE = 31_536_000
"""A year: the anchor and the visitor id outlive sessions."""


def _mac(secret_key: str, purpose: str, value: str) -> str:
    message = f"{purpose}:{value}".encode("utf-8", "surrogatepass")
    return hmac.new(secret_key.encode(), message, hashlib.sha256).hexdigest()


def csrf_token(secret_key: str, anchor: str) -> str:
    return _mac(secret_key, "csrf", anchor)


def sign(secret_key: str, purpose: str, value: str) -> str:
    """`value.mac`: what the server hands out so that it can tell its own values later."""
    return f"{value}.{_mac(secret_key, purpose, value)}"


def unsign(secret_key: str, purpose: str, signed: str | None) -> str | None:
    """The value inside a signed string the server made for `purpose`, else None."""
    if not signed or len(signed) > MAX_SIGNED_LENGTH:
        return None
    value, _, mac = signed.rpartition(".")
    if not value or not hmac.compare_digest(mac, _mac(secret_key, purpose, value)):
        return None
    return value


def header(request_headers: Iterable[tuple[bytes, bytes]], name: str) -> str | None:
    wanted = name.encode()
    for key, value in request_headers:
        if key == wanted:
            return value.decode("latin-1")
    return None


def is_embed(path: str) -> bool:
    return path.startswith(EMBED_PREFIX)


def anchor_cookie_header(name: str, value: str, *, embed: bool, secure: bool) -> str:
    """The anchor outlives sessions (a year). Inside an iframe it must be SameSite=None,
    hence Secure, and Partitioned so that browsers blocking third-party cookies keep it
    (per top-level site)."""
    attributes = "SameSite=None; Secure; Partitioned" if embed else "SameSite=Lax"
    if secure and not embed:
        attributes += "; Secure"
    return f"{name}={value}; Path=/; Max-Age={ANCHOR_MAX_AGE}; HttpOnly; {attributes}"


def fresh_anchor_cookie(secret_key: str, *, secure: bool) -> Cookie:
    """A new signed anchor cookie (the same attributes as the middleware's): sign-in
    rotates the anchor with it."""
    return Cookie(
        key=ANCHOR_COOKIE,
        value=sign(secret_key, ANCHOR_COOKIE, secrets.token_urlsafe(24)),
        max_age=ANCHOR_MAX_AGE,
        path="/",
        httponly=True,
        samesite="lax",
        secure=secure,
    )


class CSRFAnchorMiddleware:
    """Works out what identifies the browser, puts its CSRF token in `scope["state"]`, and
    gives a browser without a valid anchor (or visitor id) a new one."""

    def __init__(self, app: ASGIApp, secret_key: str) -> None:
        self.app = app
        self.secret_key = secret_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        embed = is_embed(scope["path"])
        name = VISITOR_COOKIE if embed else ANCHOR_COOKIE
        # Parsed as the authentication middleware parses them: the session the CSRF token
        # is bound to is exactly the session that signs the request in.
        connection = ASGIConnection[Any, Any, Any, Any](scope)
        cookies = connection.cookies
        if not embed and not cookies and bearer_token(connection) is not None:
            # An API client: nothing ambient to protect, and no browser to keep a cookie.
            # (A token that turns out invalid is refused by sign-in, or by `csrf_guard`,
            # which finds no CSRF token to match.)
            scope.setdefault("state", {})
            await self.app(scope, receive, send)
            return
        in_cookie = unsign(self.secret_key, name, cookies.get(name))
        anchor = in_cookie
        if embed:
            anchor = unsign(self.secret_key, name, header(headers, VISITOR_HEADER)) or anchor
        fresh = anchor is None
        if anchor is None:
            anchor = secrets.token_urlsafe(24)
        state = scope.setdefault("state", {})
        state["anchor"] = anchor
        session = None if embed else cookies.get(SESSION_COOKIE)
        bound = f"session:{hashlib.sha256(session.encode()).hexdigest()}" if session else anchor
        state["csrf_token"] = csrf_token(self.secret_key, bound)
        signed = sign(self.secret_key, name, anchor)
        if embed:
            state["visitor_token"] = signed
        secure = scope.get("scheme") == "https"

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start" and (fresh or in_cookie != anchor):
                MutableScopeHeaders.from_message(message).add(
                    "set-cookie", anchor_cookie_header(name, signed, embed=embed, secure=secure)
                )
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def hx_headers(request: Any) -> Markup:
    """The headers htmx sends on every request of a page (`hx-headers:inherited` on body,
    in a single-quoted attribute): the CSRF token, and on an embed the signed visitor id
    (for browsers that keep no cookie in a cross-site frame). Characters that could end
    the attribute are JSON escapes, so the text is safe as it is."""
    state = request.scope.get("state", {})
    values = {CSRF_HEADER: str(state.get("csrf_token", ""))}
    if state.get("visitor_token"):
        values[VISITOR_HEADER] = state["visitor_token"]
    text = json.dumps(values)
    for char in "&<>'":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return Markup(text)


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    value = connection.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def csrf_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Refuse a state-changing request from a browser that does not carry its CSRF token.

    Only a request the authentication middleware accepted by a valid API token is exempt:
    the mere header (`Bearer x`) proves nothing, and routes that need no sign-in (sign-in,
    sign-out, the embed) never validate one."""
    # The app has HTTP routes only: an app-level guard's connection is a Request.
    request = cast("Request[Any, Any, Any]", connection)
    if request.method in SAFE_METHODS or request.scope.get("auth") == "token":
        return
    expected = request.scope["state"].get("csrf_token")
    given = request.headers.get(CSRF_HEADER)
    content_type = request.headers.get("content-type", "")
    if not given and content_type.startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        form = await request.form()
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
        http = scope["type"] == ScopeType.HTTP
        allowed = frame_ancestors(scope.get("path", "")) if http else None
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
