"""Route guards on who is signed in: the admin pages and the user management share one."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import PermissionDeniedException
from litestar.handlers import BaseRouteHandler


def admin_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Fails closed: no user in scope is refused like a user who is not an admin."""
    user = connection.scope.get("user")
    if user is None or not getattr(user, "is_admin", False):
        raise PermissionDeniedException("this page is for admins only")
