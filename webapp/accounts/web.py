"""Who is asking: session cookies for browsers, bearer tokens for scripts; and the pages
to sign in, set up the first admin, sign out and manage API tokens.

A signed-in browser may do all its user may. A token may do what its scopes say
(`webapp.accounts.models.SCOPES`): what an admin-only route needs is the admin scope,
creating or revoking tokens needs the tokens scope (so a stolen token cannot mint
itself a successor), changing the account's preferences, custom instructions or password
the settings scope (so a chat token cannot rewrite what every send carries, or lock its
owner out), everything else the chat scope. The middleware refuses a token
without the scope (403) before the route runs."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from litestar import Controller, MediaType, Request, get, post
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.params import FromQuery
from litestar.response import Redirect, Template
from litestar.types import ASGIApp

from webapp.accounts.deps import Accounts
from webapp.accounts.guards import admin_only
from webapp.accounts.models import ADMIN, CHAT, DEFAULT_SCOPES, SETTINGS, TOKENS, User
from webapp.accounts.preferences import (
    MAX_INSTRUCTIONS,
    THEMES,
    Preferences,
    parse_preferences,
    preferences_of,
    save_preferences,
)
from webapp.accounts.service import SESSION_LIFETIME, AccountService
from webapp.errors import AppError, Conflict, TooManyRequests
from webapp.llm.catalog import Catalog
from webapp.llm.describe import configuration_dicts
from webapp.owners import user_owner
from webapp.web.deps import AppSettings, ServedCatalog
from webapp.web.params import RowId
from webapp.web.security import SESSION_COOKIE, bearer_token, fresh_anchor_cookie


class SessionOrTokenAuth(AbstractAuthenticationMiddleware):
    """Middleware takes no dependencies: it is given the account service it asks."""

    def __init__(self, app: ASGIApp, accounts: AccountService, **options: Any) -> None:
        super().__init__(app, **options)
        self.accounts = accounts

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        token = bearer_token(connection)
        if token is not None:
            found = await self.accounts.token_sign_in(token)
            if found is None:
                raise NotAuthorizedException("the API token is unknown or revoked")
            needed = scope_needed(connection.scope.get("route_handler"))
            if needed not in found.scopes:
                raise PermissionDeniedException(REFUSALS[needed])
            return AuthenticationResult(user=found.user, auth="token")
        secret = connection.cookies.get(SESSION_COOKIE)
        user = await self.accounts.user_for_session(secret) if secret else None
        if user is None:
            raise NotAuthorizedException("sign in first, or send an API token")
        return AuthenticationResult(user=user, auth="session")


TOKEN_SCOPE = "token_scope"
"""A route handler's `opt` key: the scope a token needs there, when not the usual one."""
TOKEN_ROUTES = {TOKEN_SCOPE: TOKENS}
SETTINGS_ROUTES = {TOKEN_SCOPE: SETTINGS}
"""What changes the account (preferences, custom instructions, password)."""
REFUSALS = {
    ADMIN: (
        "this API token has no admin scope: the admin pages and API need a token made with "
        "`webapp token create NAME --admin-scope` (or with the admin scope box on /settings)"
    ),
    TOKENS: (
        "an API token cannot create or revoke tokens: sign in on /settings, or use "
        "`webapp token create` (a token needs the tokens scope for this)"
    ),
    CHAT: "this API token has no chat scope: it is for the gateway (/v1) only",
    SETTINGS: (
        "this API token has no settings scope: change preferences, custom instructions and "
        "the password on /settings, or with a token made with `--scope settings`"
    ),
}


def scope_needed(handler: BaseRouteHandler | None) -> str:
    """The scope a token needs for a route. Fails closed: a route guarded by `admin_only`
    at any layer needs the admin scope, whatever else it says."""
    if handler is None:
        return ADMIN
    if any(admin_only in (layer.guards or ()) for layer in handler.ownership_layers):
        return ADMIN
    return str(handler.opt.get(TOKEN_SCOPE, CHAT))


def owner_of(request: Request[Any, Any, Any]) -> str:
    """Conversations belong to an owner string: `user:<id>` here, `embed:...` for visitors."""
    user: User = request.user
    assert user.id is not None
    return user_owner(user.id)


def session_cookie(secret: str, *, secure: bool) -> Cookie:
    return Cookie(
        key=SESSION_COOKIE,
        value=secret,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        httponly=True,
        samesite="lax",
        secure=secure,
        path="/",
    )


def safe_next(target: str | None) -> str:
    """Only a local path: never let a login link send someone to another site."""
    if not target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


async def _form(request: Request[Any, Any, Any]) -> dict[str, str]:
    form = await request.form()
    return {key: value for key, value in form.items() if isinstance(value, str)}


class AccountPages(Controller):
    include_in_schema = False

    @get("/login", exclude_from_auth=True, media_type=MediaType.HTML)
    async def login_form(self, accounts: Accounts, next: FromQuery[str | None] = None) -> Any:
        if not await accounts.has_users():
            return Redirect("/setup", status_code=303)
        return Template("accounts/login.html", context={"next": safe_next(next), "error": None})

    @post("/login", exclude_from_auth=True, media_type=MediaType.HTML)
    async def login(
        self, request: Request[Any, Any, Any], accounts: Accounts, settings: AppSettings
    ) -> Any:
        form = await _form(request)
        target = safe_next(form.get("next"))
        try:
            user = await accounts.authenticate(
                form.get("username", ""),
                form.get("password", ""),
                client=request.client.host if request.client else "",
            )
        except TooManyRequests as refused:
            return Template(
                "accounts/login.html",
                context={"next": target, "error": refused.message},
                status_code=429,
                headers={"Retry-After": str(refused.retry_after)},
            )
        if user is None or user.id is None:
            return Template(
                "accounts/login.html",
                context={"next": target, "error": "Wrong username or password."},
                status_code=400,
            )
        return await _signed_in(request, accounts, settings.secret_key, user.id, target)

    @post("/logout", exclude_from_auth=True)
    async def logout(self, request: Request[Any, Any, Any], accounts: Accounts) -> Redirect:
        secret = request.cookies.get(SESSION_COOKIE)
        if secret:
            await accounts.end_session(secret)
        response = Redirect("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    @get("/setup", exclude_from_auth=True, media_type=MediaType.HTML)
    async def setup_form(self, accounts: Accounts) -> Any:
        if await accounts.has_users():
            return Redirect("/login", status_code=303)
        return Template("accounts/setup.html", context={"error": None, "username": ""})

    @post("/setup", exclude_from_auth=True, media_type=MediaType.HTML)
    async def setup(
        self, request: Request[Any, Any, Any], accounts: Accounts, settings: AppSettings
    ) -> Any:
        form = await _form(request)
        username = form.get("username", "")
        if form.get("password") != form.get("password2"):
            return Template(
                "accounts/setup.html",
                context={"error": "The two passwords differ.", "username": username},
                status_code=400,
            )
        try:
            user = await accounts.create_first_admin(username, form.get("password", ""))
        except Conflict:
            return Redirect("/login", status_code=303)
        except AppError as error:
            return Template(
                "accounts/setup.html",
                context={"error": error.message, "username": username},
                status_code=error.status_code,
            )
        assert user.id is not None
        return await _signed_in(request, accounts, settings.secret_key, user.id, "/")

    @get("/settings")
    async def settings(
        self,
        request: Request[Any, Any, Any],
        accounts: Accounts,
        catalog: ServedCatalog,
        done: FromQuery[str] = "",
    ) -> Template:
        return await _settings_page(
            request,
            accounts,
            catalog,
            new_token=None,
            password_changed=done == "password",
            saved=done == "preferences",
        )

    @post("/settings/preferences", opt=SETTINGS_ROUTES)
    async def save_settings(
        self, request: Request[Any, Any, Any], accounts: Accounts, catalog: ServedCatalog
    ) -> Redirect | Template:
        """The default configuration, theme and custom instructions; a refused form comes
        back with the reason and what was typed."""
        form = await _form(request)
        try:
            chosen = parse_preferences(form, catalog)
        except AppError as error:
            return await _settings_page(
                request, accounts, catalog, new_token=None, error=error, typed=form
            )
        await save_preferences(accounts.db, request.user.id, chosen)
        return Redirect("/settings?done=preferences", status_code=303)

    @post("/settings/tokens", opt=TOKEN_ROUTES)
    async def create_token(
        self, request: Request[Any, Any, Any], accounts: Accounts, catalog: ServedCatalog
    ) -> Template:
        """A new token: chat and the gateway, and the admin scope if an admin asks."""
        form = await _form(request)
        scopes = [*DEFAULT_SCOPES, *([ADMIN] if form.get("admin_scope") == "on" else [])]
        _, plain = await accounts.create_token(
            request.user.id, form.get("name", "").strip(), scopes
        )
        return await _settings_page(request, accounts, catalog, new_token=plain)

    @post("/settings/tokens/{token_id:int}/revoke", opt=TOKEN_ROUTES)
    async def revoke_token(
        self, request: Request[Any, Any, Any], accounts: Accounts, token_id: RowId
    ) -> Redirect:
        await accounts.revoke_token(request.user.id, token_id)
        return Redirect("/settings", status_code=303)


async def _signed_in(
    request: Request[Any, Any, Any],
    accounts: AccountService,
    secret_key: str,
    user_id: int,
    target: str,
) -> Redirect:
    """Open a session and go on. The CSRF token follows the session from now on (see
    webapp.web.security); the anchor cookie used before signing in is replaced too, so
    nothing a page showed before sign-in works after it."""
    secret = await accounts.start_session(user_id)
    secure = _https(request)
    return Redirect(
        target,
        status_code=303,
        cookies=[
            session_cookie(secret, secure=secure),
            fresh_anchor_cookie(secret_key, secure=secure),
        ],
    )


async def _settings_page(
    request: Request[Any, Any, Any],
    accounts: AccountService,
    catalog: Catalog,
    new_token: str | None,
    *,
    password_changed: bool = False,
    saved: bool = False,
    error: AppError | None = None,
    typed: dict[str, str] | None = None,
) -> Template:
    """The settings page; after a refused settings form, again with the reason and what
    was typed, answered with the error's 4xx status."""
    shown = preferences_of(request.user)
    if typed is not None:
        shown = Preferences(
            typed.get("default_configuration") or None,
            typed.get("theme", shown.theme),
            typed.get("custom_instructions", ""),
        )
    return Template(
        "accounts/settings.html",
        context={
            "tokens": await accounts.list_tokens(request.user.id),
            "new_token": new_token,
            "password_changed": password_changed,
            "saved": saved,
            "preferences": shown,
            "themes": THEMES,
            "max_instructions": MAX_INSTRUCTIONS,
            "configurations": configuration_dicts(catalog),
            "catalog_default": catalog.default_configuration,
            "settings_error": error.message if error else None,
        },
        status_code=error.status_code if error else 200,
    )


def _https(request: Request[Any, Any, Any]) -> bool:
    return request.url.scheme == "https"
