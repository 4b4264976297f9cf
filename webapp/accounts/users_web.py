"""Users in the UI and the API (docs/design.md section 9): `/admin/users` and `/api/admin/users`
for admins, `POST /settings/password` for everyone. The rules live in
`webapp.accounts.management`; these handlers only read forms and JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Controller, MediaType, Request, get, patch, post
from litestar.params import FromQuery, JSONBody
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_201_CREATED

from webapp.accounts.deps import Accounts
from webapp.accounts.guards import admin_only
from webapp.accounts.management import Changes, UserManagement, user_dict
from webapp.accounts.service import AccountService
from webapp.accounts.web import SETTINGS_ROUTES
from webapp.errors import AppError, InvalidInput
from webapp.web.params import RowId
from webapp.web.security import SESSION_COOKIE


@dataclass
class NewUser:
    username: str
    password: str
    is_admin: bool = False


@dataclass
class UserChanges:
    is_admin: bool | None = None
    active: bool | None = None
    password: str | None = None


async def _form(request: Request[Any, Any, Any]) -> dict[str, str]:
    form = await request.form()
    return {key: value for key, value in form.items() if isinstance(value, str)}


class UserAdminApi(Controller):
    path = "/api/admin/users"
    guards = (admin_only,)
    tags = ("admin",)

    @get("/")
    async def list_users(self, accounts: Accounts) -> list[dict[str, object]]:
        return [user_dict(user) for user in await UserManagement(accounts).list()]

    @post("/", status_code=HTTP_201_CREATED)
    async def create_user(self, accounts: Accounts, data: JSONBody[NewUser]) -> dict[str, object]:
        user = await UserManagement(accounts).create(
            data.username, data.password, is_admin=data.is_admin
        )
        return user_dict(user)

    @patch("/{user_id:int}")
    async def update_user(
        self, accounts: Accounts, user_id: RowId, data: JSONBody[UserChanges]
    ) -> dict[str, object]:
        """`active: false` or a new `password` ends the user's sessions and revokes their
        tokens. The last active admin stays one (409)."""
        changes = Changes(is_admin=data.is_admin, active=data.active, password=data.password)
        return user_dict(await UserManagement(accounts).update(user_id, changes))


ACTIONS = {
    "make-admin": Changes(is_admin=True),
    "remove-admin": Changes(is_admin=False),
    "deactivate": Changes(active=False),
    "activate": Changes(active=True),
}
DONE = {
    "created": "Account created.",
    "make-admin": "They are an admin now.",
    "remove-admin": "They are no longer an admin.",
    "deactivate": "Deactivated: their sessions and tokens no longer work.",
    "activate": "Activated: they can sign in again.",
    "reset": "Password reset: their sessions have ended and their API tokens are revoked.",
}


async def _users_page(
    accounts: AccountService,
    *,
    notice: str | None = None,
    error: AppError | None = None,
    typed: dict[str, str] | None = None,
    failed_user: int | None = None,
) -> Template:
    """The users page; after a refused form, again with the reason and what was typed (a
    password is never sent back), answered with the error's 4xx status, not a bare page."""
    return Template(
        "admin/users.html",
        context={
            "users": await UserManagement(accounts).list(),
            "notice": notice,
            "form_error": error.message if error else None,
            "typed": typed or {},
            "failed_user": failed_user,
        },
        status_code=error.status_code if error else 200,
    )


class UserPages(Controller):
    include_in_schema = False

    @get("/admin/users", guards=[admin_only], media_type=MediaType.HTML)
    async def users_page(self, accounts: Accounts, done: FromQuery[str] = "") -> Template:
        return await _users_page(accounts, notice=DONE.get(done))

    @post("/admin/users", guards=[admin_only])
    async def create_from_form(
        self, request: Request[Any, Any, Any], accounts: Accounts
    ) -> Redirect | Template:
        form = await _form(request)
        try:
            await UserManagement(accounts).create(
                form.get("username", "").strip(),
                form.get("password", ""),
                is_admin=form.get("is_admin") == "on",
            )
        except AppError as error:
            return await _users_page(accounts, error=error, typed=form)
        return Redirect("/admin/users?done=created", status_code=303)

    @post("/admin/users/{user_id:int}", guards=[admin_only])
    async def change_from_form(
        self, request: Request[Any, Any, Any], accounts: Accounts, user_id: RowId
    ) -> Redirect | Template:
        form = await _form(request)
        action = form.get("action", "")
        try:
            if action == "reset":
                changes = Changes(password=form.get("password", ""))
            elif action in ACTIONS:
                changes = ACTIONS[action]
            else:
                raise InvalidInput(f"unknown action {action!r}")
            await UserManagement(accounts).update(user_id, changes)
        except AppError as error:
            return await _users_page(accounts, error=error, failed_user=user_id)
        return Redirect(f"/admin/users?done={action}", status_code=303)

    @post("/settings/password", opt=SETTINGS_ROUTES)
    async def change_password(
        self, request: Request[Any, Any, Any], accounts: Accounts
    ) -> Redirect:
        """Change one's own password; this browser stays signed in, every other session
        of the account ends and every API token of it is revoked."""
        form = await _form(request)
        if form.get("new_password", "") != form.get("new_password2", ""):
            raise InvalidInput("the two new passwords differ")
        await UserManagement(accounts).change_own_password(
            request.user.id,
            form.get("current_password", ""),
            form.get("new_password", ""),
            keep_session=request.cookies.get(SESSION_COOKIE, ""),
        )
        return Redirect("/settings?done=password", status_code=303)
