"""A user's own settings: the configuration new conversations start with, the theme every
page is drawn in, and custom instructions sent with the system prompt of every send.

They live on the user's row (`User.default_configuration`, `theme`,
`custom_instructions`), so the session that signs a request in has them already; the
send reads the instructions inside its own transaction (`owner_instructions`), so the
fit is made with exactly what is sent.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, update
from sqlmodel import Session, col, select

from webapp.accounts.models import User
from webapp.db import Database
from webapp.errors import InvalidInput, NotFound, refuse_nul
from webapp.llm.catalog import Catalog
from webapp.llm.head_room import crowded_out
from webapp.llm.routing import RoutingError, resolve
from webapp.owners import USER_OWNER_PREFIX
from webapp.prepared import Prepared

THEMES = ("system", "light", "dark")
"""`system` follows the device's light or dark setting."""
MAX_INSTRUCTIONS = 4000
"""Characters of custom instructions: they go with every send, so they are kept short
enough never to crowd the conversation out of a small window."""


@dataclass(frozen=True, slots=True)
class Preferences:
    default_configuration: str | None
    theme: str
    custom_instructions: str


def parse_preferences(form: Mapping[str, str], catalog: Catalog) -> Preferences:
    """The settings form, checked: InvalidInput (400) names what is wrong. Instructions
    that leave no room for a message in the configuration new conversations start with
    are refused (`webapp.llm.head_room`), naming the smallest window they fit."""
    configuration = form.get("default_configuration", "").strip() or None
    if configuration is not None and configuration not in catalog.configurations:
        known = ", ".join(catalog.configurations)
        raise InvalidInput(f"unknown configuration {configuration!r}; known: {known}")
    theme = form.get("theme", "system")
    if theme not in THEMES:
        raise InvalidInput(f"the theme is one of {', '.join(THEMES)}, not {theme!r}")
    instructions = refuse_nul(form.get("custom_instructions", ""), "the custom instructions")
    instructions = instructions.replace("\r\n", "\n").strip()
    if len(instructions) > MAX_INSTRUCTIONS:
        raise InvalidInput(
            f"custom instructions are at most {MAX_INSTRUCTIONS:,} characters; "
            f"these are {len(instructions):,}"
        )
    try:
        route = resolve(catalog, configuration or catalog.default_configuration)
    except RoutingError:
        route = None  # nothing to fit them to: the send will say so
    crowded = crowded_out(catalog, route, instructions) if route else None
    if crowded is not None:
        raise InvalidInput(crowded)
    return Preferences(configuration, theme, instructions)


def preferences_of(user: User) -> Preferences:
    return Preferences(user.default_configuration, user.theme, user.custom_instructions)


async def save_preferences(db: Database, user_id: int, preferences: Preferences) -> None:
    def write(session: Session) -> None:
        done = session.connection().execute(
            update(User)
            .where(col(User.id) == user_id)
            .values(
                default_configuration=preferences.default_configuration,
                theme=preferences.theme,
                custom_instructions=preferences.custom_instructions,
            )
        )
        if done.rowcount == 0:
            raise NotFound("no such user")

    await db.write(write)


def preferred_configuration(user: User | None, configurations: Collection[str]) -> str | None:
    """The user's configuration for new conversations, while the catalog still has it;
    None means the catalog's default."""
    chosen = user.default_configuration if user is not None else None
    return chosen if chosen in configurations else None


def theme_of(user: object) -> str:
    """The theme a page is drawn in: the signed-in user's, else the device's."""
    theme = getattr(user, "theme", None)
    return theme if theme in THEMES else "system"


def theme_for(request: Any) -> str:
    """The theme `<html>` is drawn in (the signed-in user's setting): set by the server,
    so a page never shows in the wrong colours first."""
    return theme_of(request.scope.get("user"))


_INSTRUCTIONS = Prepared(
    select(col(User.custom_instructions)).where(col(User.id) == bindparam("user_id"))
)
"""Read on every send, inside its transaction: built once (building a Core statement
cost the send more than running it)."""


def owner_instructions(connection: Connection, owner: str) -> str:
    """The custom instructions of a conversation's owner ("" for embed visitors, who have
    no settings, and for a user who has none)."""
    if not owner.startswith(USER_OWNER_PREFIX):
        return ""
    user_id = owner.removeprefix(USER_OWNER_PREFIX)
    if not user_id.isdigit():
        return ""
    found = _INSTRUCTIONS.first(connection, {"user_id": int(user_id)})
    return (found[0] if found is not None else None) or ""


def with_instructions(system_prompt: str | None, instructions: str) -> str | None:
    """The system prompt a send carries: the configuration's, then the user's
    instructions after a blank line."""
    parts = [part for part in (system_prompt, instructions) if part]
    return "\n\n".join(parts) or None
