"""Whether a configuration's system prompt, with a user's custom instructions, leaves room
for a conversation: the one rule that refuses instructions when they are saved and a send
they would crowd out.

The system prompt is the head of every send (`webapp.llm.window`): never left out, so
instructions larger than a model's budget make every send overflow at the floor, and the
engine refuse it as too long, with nothing naming them. This rule sees it first. It
errs the way the estimate does (high), and counts a route's largest budget: a fallback
with a larger window could still serve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webapp.llm.catalog import Catalog, ModelSpec
from webapp.llm.estimator import estimate_message, estimate_text
from webapp.llm.routing import Route, RoutingError, resolve
from webapp.llm.window import budget_for, reserve_of

MESSAGE_ROOM = 64
"""Tokens the system prompt must leave for a message at the least (a short question and
its framing); less is no room."""


@dataclass(frozen=True, slots=True)
class Room:
    """The most prompt a configuration's route could take, and where."""

    configuration: str
    model: str
    window: int
    budget: int


def room_of(
    route: Route,
    serving: Callable[[ModelSpec], ModelSpec] | None = None,
    max_tokens: int | None = None,
) -> Room:
    """The route's largest budget (`serving`: the model as its engine runs it, a learned
    window smaller than the catalog's; `max_tokens`: an answer's room other than the
    configuration's, a preset's)."""
    most = max_tokens if max_tokens is not None else route.configuration.max_tokens
    rooms = [
        (budget_for(model, reserve_of(most, model)), model)
        for model in (serving(m) if serving else m for m in route.models)
    ]
    budget, model = max(rooms, key=lambda pair: pair[0])
    return Room(route.configuration.name, model.name, model.window, budget)


def leaves_room(room: Room, system_prompt: str | None, instructions: str) -> bool:
    system = "\n\n".join(part for part in (system_prompt, instructions) if part)
    return estimate_message({"role": "system", "content": system}) + MESSAGE_ROOM <= room.budget


def crowded_out(
    catalog: Catalog,
    route: Route,
    instructions: str,
    serving: Callable[[ModelSpec], ModelSpec] | None = None,
    *,
    max_tokens: int | None = None,
    named: str = "your custom instructions",
    where: str = "Settings",
) -> str | None:
    """None while the instructions leave room in the route; else why not, naming them
    (`named`: a preset's system prompt with them, shortened in `where`), the
    configuration and the smallest window of the catalog's configurations that holds
    them (what the user may switch to). `max_tokens`: the answer's room, if a preset
    sets it."""
    if not instructions:
        return None
    room = room_of(route, serving, max_tokens)
    if leaves_room(room, route.configuration.system_prompt, instructions):
        return None
    said = (
        f"{named} (about {estimate_text(instructions):,} tokens) leave no "
        f"room for a message in configuration {room.configuration!r} (model {room.model}, "
        f"a window of {room.window:,} tokens, {room.budget:,} for the prompt): shorten "
        f"them in {where}"
    )
    fits = _smallest_that_fits(catalog, instructions)
    if fits is None:
        return f"{said}; no configuration here has a window that holds them"
    return (
        f"{said}, or use configuration {fits.configuration!r}, the smallest window they fit "
        f"({fits.window:,} tokens)"
    )


def _smallest_that_fits(catalog: Catalog, instructions: str) -> Room | None:
    fitting = []
    for name, spec in catalog.configurations.items():
        try:
            room = room_of(resolve(catalog, name))
        except RoutingError:
            continue
        if leaves_room(room, spec.system_prompt, instructions):
            fitting.append(room)
    return min(fitting, key=lambda room: (room.window, room.configuration), default=None)
