"""Who is calling the gateway: an API token, and nothing else.

The gateway takes no session cookie, so a page on another site cannot make a
visitor's browser call it with their credentials: it needs no CSRF token, and the
app's CSRF guard already lets bearer-token requests through. The app's own
session-or-token middleware skips /v1 so that a cookie never authenticates here. The
token needs the gateway scope (every token has it unless made without it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import ASGIApp

from webapp.accounts.models import GATEWAY
from webapp.accounts.service import AccountService
from webapp.web.security import bearer_token


class BearerTokenAuth(AbstractAuthenticationMiddleware):
    """Middleware takes no dependencies: it is given the account service it asks."""

    def __init__(self, app: ASGIApp, accounts: AccountService, **options: Any) -> None:
        super().__init__(app, **options)
        self.accounts = accounts

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        token = bearer_token(connection)
        if token is None:
            raise NotAuthorizedException(
                "Send an API token as 'Authorization: Bearer <token>' (create one on "
                "/settings or with `webapp token create`); the gateway takes no cookies."
            )
        found = await self.accounts.token_sign_in(token)
        if found is None:
            raise NotAuthorizedException("The API token is unknown or revoked.")
        if GATEWAY not in found.scopes:
            raise PermissionDeniedException(
                "This API token has no gateway scope: make one with `webapp token create NAME`."
            )
        return AuthenticationResult(user=found.user, auth="token")


def bearer_token_auth(accounts: AccountService) -> Callable[[ASGIApp], ASGIApp]:
    """The gateway router's middleware, made with the service it asks. A function, not a
    `DefineMiddleware`: a router's layers are deep-copied when it is registered, and a
    function is kept as it is where the service (its database pool) cannot be copied."""

    def middleware(app: ASGIApp) -> ASGIApp:
        return BearerTokenAuth(app, accounts)

    return middleware
