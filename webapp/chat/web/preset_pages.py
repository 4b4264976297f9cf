"""The presets page (`/settings/presets`): the user's presets, each editable in place, a
form for a new one, and Delete; plain forms that come back to the page, a refused one
with the reason and what was typed."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from webapp.chat.stored.presets import FIELDS
from webapp.chat.web.deps import Chat
from webapp.errors import InvalidInput
from webapp.llm.describe import configuration_dicts
from webapp.web.deps import Owner

PAGE = "/settings/presets"


async def preset_form(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """The form's fields as the API takes them: the checkbox as true or false, the rest as
    typed (the rules read "" as "not set")."""
    form = await request.form()
    given: dict[str, Any] = {
        field: value
        for field in FIELDS
        if field != "is_default" and isinstance(value := form.get(field), str)
    }
    given["is_default"] = form.get("is_default") == "on"
    return given


class PresetPages(Controller):
    include_in_schema = False

    @get(PAGE)
    async def presets_page(self, chat: Chat, owner: Owner, done: FromQuery[str] = "") -> Template:
        return await _page(chat, owner, done=done)

    @post(PAGE)
    async def create(
        self, request: Request[Any, Any, Any], chat: Chat, owner: Owner
    ) -> Response[Any]:
        given = await preset_form(request)
        try:
            await chat.presets.create(owner, given)
        except InvalidInput as error:
            return await _page(chat, owner, error=error.message, typed=given)
        return Redirect(f"{PAGE}?done=created", status_code=303)

    @post(f"{PAGE}/{{preset_id:int}}")
    async def update(
        self, request: Request[Any, Any, Any], chat: Chat, owner: Owner, preset_id: FromPath[int]
    ) -> Response[Any]:
        given = await preset_form(request)
        try:
            await chat.presets.update(owner, preset_id, given)
        except InvalidInput as error:
            return await _page(chat, owner, error=error.message, failed=preset_id)
        return Redirect(f"{PAGE}?done=saved", status_code=303)

    @post(f"{PAGE}/{{preset_id:int}}/delete")
    async def remove(self, chat: Chat, owner: Owner, preset_id: FromPath[int]) -> Redirect:
        await chat.presets.delete(owner, preset_id)
        return Redirect(f"{PAGE}?done=deleted", status_code=303)


async def _page(
    chat: Chat,
    owner: str,
    *,
    done: str = "",
    error: str | None = None,
    typed: dict[str, Any] | None = None,
    failed: int | None = None,
) -> Template:
    """The page; after a refused form, with the reason (400), next to the new preset's
    form (`typed`: what was typed there) or the preset that was being edited (`failed`)."""
    return Template(
        "chat/presets.html",
        context={
            "presets": await chat.presets.list(owner),
            "configurations": configuration_dicts(chat.catalog),
            "default_configuration": chat.catalog.default_configuration,
            "done": done if done in ("created", "saved", "deleted") else "",
            "error": error,
            "typed": {**dict.fromkeys(FIELDS), **(typed or {})},
            "failed": failed,
        },
        status_code=400 if error else 200,
    )
