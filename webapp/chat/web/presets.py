"""The presets API (docs/design.md section 15): `GET|POST /api/presets`,
`PATCH|DELETE /api/presets/{id}`; another user's preset is a 404."""

from __future__ import annotations

from typing import Any

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_201_CREATED

from webapp.chat.stored.presets import preset_dict
from webapp.chat.web.deps import Chat
from webapp.errors import InvalidInput
from webapp.web.deps import Owner


def _fields(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput("a preset is a JSON object")
    return data


class PresetController(Controller):
    path = "/api/presets"
    tags = ("presets",)

    @get("/")
    async def list_presets(self, chat: Chat, owner: Owner) -> list[dict[str, Any]]:
        return [preset_dict(preset) for preset in await chat.presets.list(owner)]

    @post("/", status_code=HTTP_201_CREATED)
    async def create_preset(
        self, chat: Chat, owner: Owner, data: JSONBody[dict[str, Any]]
    ) -> dict[str, Any]:
        """`{name, configuration, system_prompt, temperature, max_tokens, is_default}`:
        only the name is required."""
        return preset_dict(await chat.presets.create(owner, _fields(data)))

    @patch("/{preset_id:int}")
    async def update_preset(
        self, chat: Chat, owner: Owner, preset_id: FromPath[int], data: JSONBody[dict[str, Any]]
    ) -> dict[str, Any]:
        """The fields given change; the others stay."""
        return preset_dict(await chat.presets.update(owner, preset_id, _fields(data)))

    @delete("/{preset_id:int}", status_code=204)
    async def delete_preset(self, chat: Chat, owner: Owner, preset_id: FromPath[int]) -> None:
        """Conversations that used it go on with their configuration alone."""
        await chat.presets.delete(owner, preset_id)
