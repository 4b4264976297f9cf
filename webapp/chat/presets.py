"""A user's presets: list, create, edit and delete them, checked against the catalog as
it is served (`webapp.chat.stored.preset_rules`) and written in one transaction each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from webapp.accounts.preferences import owner_instructions
from webapp.chat.stored.models import Conversation
from webapp.chat.stored.preset_rules import checked_preset
from webapp.chat.stored.presets import (
    COLUMNS,
    Preset,
    PresetValues,
    as_columns,
    one_preset,
    owned_preset,
    preset_named,
    user_of,
    values_of,
)
from webapp.db import Database, as_loaded
from webapp.errors import InvalidInput
from webapp.llm.catalog import Catalog
from webapp.llm.manager import LLMManager

PRESETS_MAX = 100
"""Presets one user keeps: a script cannot fill the table."""


class Presets:
    """Reads the catalog through the manager: discovery at start replaces it."""

    def __init__(self, db: Database, manager: LLMManager) -> None:
        self._db = db
        self._manager = manager

    @property
    def catalog(self) -> Catalog:
        return self._manager.catalog

    async def list(self, owner: str) -> list[Preset]:
        user_id = user_of(owner)

        def read(session: Session) -> list[Preset]:
            rows = session.connection().execute(
                select(*COLUMNS).where(col(Preset.user_id) == user_id).order_by(col(Preset.name))
            )
            return [as_loaded(Preset, dict(row._mapping)) for row in rows]

        return await self._db.read(read)

    async def named(self, owner: str, name: str) -> Preset | None:
        """The owner's preset of that name (None for another user's, or none)."""

        def read(session: Session) -> Preset | None:
            return preset_named(session.connection(), owner, name)

        return await self._db.read(read)

    async def create(self, owner: str, given: Mapping[str, Any]) -> Preset:
        user_id = user_of(owner)
        catalog = self.catalog

        def make(session: Session) -> Preset:
            connection = session.connection()
            values = checked_preset(given, catalog, owner_instructions(connection, owner))
            held = connection.execute(
                select(col(Preset.id)).where(col(Preset.user_id) == user_id)
            ).all()
            if len(held) >= PRESETS_MAX:
                raise InvalidInput(f"at most {PRESETS_MAX} presets: delete one first")
            return _stored(connection, user_id, None, values)

        return await self._db.write(make)

    async def update(self, owner: str, preset_id: int, given: Mapping[str, Any]) -> Preset:
        user_id = user_of(owner)
        catalog = self.catalog

        def change(session: Session) -> Preset:
            connection = session.connection()
            preset = owned_preset(connection, owner, preset_id)
            values = checked_preset(
                given, catalog, owner_instructions(connection, owner), values_of(preset)
            )
            return _stored(connection, user_id, preset_id, values)

        return await self._db.write(change)

    async def delete(self, owner: str, preset_id: int) -> None:
        def remove(session: Session) -> None:
            connection = session.connection()
            owned_preset(connection, owner, preset_id)
            # The database sets it NULL too (ON DELETE SET NULL); said here so the
            # conversations' next send starts its cut afresh.
            connection.execute(
                update(Conversation)
                .where(col(Conversation.preset_id) == preset_id)
                .values(preset_id=None, cut_reset=True)
            )
            connection.execute(delete(Preset).where(col(Preset.id) == preset_id))

        await self._db.write(remove)


def _stored(
    connection: Connection, user_id: int, preset_id: int | None, values: PresetValues
) -> Preset:
    """Write the preset (a new one without `preset_id`); a default one takes the place of
    the user's other default, and a name the user already gave another preset is
    refused (400)."""
    other = col(Preset.id) != (preset_id or 0)
    clash = one_preset(
        connection, col(Preset.user_id) == user_id, col(Preset.name) == values.name, other
    )
    if clash is not None:
        raise InvalidInput(f"you already have a preset named {values.name!r}")
    if values.is_default:
        connection.execute(
            update(Preset).where(col(Preset.user_id) == user_id, other).values(is_default=False)
        )
    try:
        if preset_id is None:
            done = connection.execute(insert(Preset).values(user_id=user_id, **as_columns(values)))
            preset_id = done.inserted_primary_key[0]  # type: ignore[index]
        else:
            connection.execute(
                update(Preset).where(col(Preset.id) == preset_id).values(**as_columns(values))
            )
    except IntegrityError:  # a concurrent request took the name first
        raise InvalidInput(f"you already have a preset named {values.name!r}") from None
    stored = one_preset(connection, col(Preset.id) == preset_id)
    assert stored is not None, "the preset was just written"
    return stored
