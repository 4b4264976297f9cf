"""A gateway call's `model`: a configuration's name, or one of the caller's presets as
`preset:<name>` (DESIGN 15), whose configuration serves it; its system prompt goes
first, its answer room and temperature with the call. An unknown preset, like an unknown
model, is OpenAI's 404 `model_not_found`; another user's preset is unknown."""

from __future__ import annotations

from dataclasses import dataclass

from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.presets import Preset
from webapp.gateway.deps import resolve_route
from webapp.gateway.errors import model_not_found
from webapp.llm.providers.base import Message
from webapp.llm.routing import Route

PRESET_PREFIX = "preset:"


@dataclass(frozen=True, slots=True)
class Addressed:
    """The route a call's `model` names, and the preset, if it named one."""

    route: Route
    preset: Preset | None = None


async def addressed(chat: ChatJobs, owner: str, model: str) -> Addressed:
    if not model.startswith(PRESET_PREFIX):
        return Addressed(resolve_route(chat.manager, model))
    preset = await chat.presets.named(owner, model.removeprefix(PRESET_PREFIX))
    if preset is None:
        raise model_not_found(model)
    return Addressed(resolve_route(chat.manager, preset.configuration), preset)


def with_preset_prompt(messages: list[Message], preset: Preset | None) -> list[Message]:
    """The caller's messages after the preset's system prompt (none without one)."""
    if preset is None or not preset.system_prompt:
        return messages
    return [{"role": "system", "content": preset.system_prompt}, *messages]
