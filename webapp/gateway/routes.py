"""The /v1 router: models, and the wiring of every gateway endpoint.

Each call names a configuration as its `model`, or one of the caller's presets as
`preset:<name>`; the configuration's route (fixed model or criteria, then fallbacks)
decides which model serves. `/v1/models` lists both, the presets of the caller only.
The router takes bearer tokens only, answers every error in OpenAI's shape, and counts
model calls against the chat's per-user rate limit.
"""

from __future__ import annotations

from typing import Any

from litestar import Router, get
from litestar.di import Provide
from litestar.params import FromPath

from webapp.accounts.service import AccountService
from webapp.chat.sending.admission import Admission
from webapp.chat.stored.presets import Preset
from webapp.chat.web.deps import Chat
from webapp.db import Database
from webapp.gateway.auth import bearer_token_auth
from webapp.gateway.chat import chat_completions
from webapp.gateway.cuts import StatelessCuts
from webapp.gateway.errors import gateway_exception_handler, model_not_found
from webapp.gateway.intake import Intake
from webapp.gateway.limits import RateLimit
from webapp.gateway.passthrough import completions, embeddings
from webapp.gateway.presets import PRESET_PREFIX
from webapp.llm.describe import configuration_dicts
from webapp.settings import Settings
from webapp.web.deps import Owner


def _model_entry(described: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": described["name"],
        "object": "model",
        "created": 0,
        "owned_by": "webapp",
        "webapp": {
            "kind": described["kind"],
            "model": described["serving_model"],
            "window": described["window"],
            "fallbacks": described["fallbacks"],
            "max_tokens": described["max_tokens"],
        },
    }


def _preset_entry(preset: Preset, described: dict[str, Any]) -> dict[str, Any]:
    """A preset as a model: its configuration's entry, under the name a call gives it,
    with the preset's own answer room when it sets one."""
    entry = _model_entry(described)
    entry["id"] = PRESET_PREFIX + preset.name
    entry["webapp"] |= {
        "kind": "preset",
        "configuration": preset.configuration,
        "max_tokens": preset.max_tokens or described["max_tokens"],
    }
    return entry


async def _entries(chat: Chat, owner: str) -> list[dict[str, Any]]:
    """The configurations, then the caller's presets whose configuration is still served
    (a preset over a configuration gone from the catalog cannot be called, so is not
    offered)."""
    described = {entry["name"]: entry for entry in configuration_dicts(chat.catalog)}
    entries = [_model_entry(entry) for entry in described.values()]
    for preset in await chat.presets.list(owner):
        if preset.configuration in described:
            entries.append(_preset_entry(preset, described[preset.configuration]))
    return entries


@get("/models")
async def list_models(chat: Chat, owner: Owner) -> dict[str, Any]:
    """What a call's `model` may name: the configurations, and the caller's presets as
    `preset:<name>` (never another user's)."""
    return {"object": "list", "data": await _entries(chat, owner)}


@get("/models/{name:str}")
async def read_model(chat: Chat, owner: Owner, name: FromPath[str]) -> dict[str, Any]:
    for entry in await _entries(chat, owner):
        if entry["id"] == name:
            return entry
    raise model_not_found(name)


def gateway_router(
    db: Database, settings: Settings, accounts: AccountService, admission: Admission
) -> Router:
    """The /v1 router: bearer tokens only (checked by `accounts`), OpenAI-shaped errors,
    the chat's admission, bodies bounded in bytes and in messages (`webapp.gateway.intake`)."""
    limit = RateLimit(db, admission)
    intake = Intake(limit, settings.gateway_max_messages)
    cuts = StatelessCuts()
    return Router(
        path="/v1",
        route_handlers=[list_models, read_model, chat_completions, completions, embeddings],
        middleware=[bearer_token_auth(accounts)],
        exception_handlers={Exception: gateway_exception_handler},
        request_max_body_size=settings.gateway_max_body_bytes,
        dependencies={
            "limit": Provide(lambda: limit, sync_to_thread=False),
            "intake": Provide(lambda: intake, sync_to_thread=False),
            "cuts": Provide(lambda: cuts, sync_to_thread=False),
        },
        tags=["openai-compatible gateway"],
    )
