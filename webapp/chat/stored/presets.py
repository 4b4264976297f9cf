"""The preset row, a user's own system prompt, temperature and answer length over one of
the catalog's configurations, chosen per conversation (`conversation.preset_id`); and its
look-ups, each by the owner's user id: another user's preset is not found (404),
whatever its id."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    ColumnElement,
    Connection,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    inspect,
    select,
    text,
)
from sqlmodel import Field, SQLModel, col

from webapp.chat.stored.models import Conversation
from webapp.db import as_loaded
from webapp.errors import NotFound
from webapp.owners import owner_columns
from webapp.timeutil import utcnow

NAME_MAX = 60
"""Characters of a preset's name: it is shown in the header's picker, and addressed by the
gateway as `preset:<name>`."""


class Preset(SQLModel, table=True):
    __table_args__ = (
        UniqueConstraint("user_id", "name", name="uq_preset_user_name"),
        # The database's own guarantee of one default per user.
        Index(
            "ix_preset_one_default",
            "user_id",
            unique=True,
            sqlite_where=text("is_default = 1"),
            postgresql_where=text("is_default"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(
        sa_column=Column(Integer, ForeignKey("user_account.id", ondelete="CASCADE"), nullable=False)
    )
    name: str = Field(max_length=NAME_MAX)
    configuration: str = Field(max_length=100)
    system_prompt: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    """Sent after the configuration's system prompt and before the user's instructions."""
    temperature: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    """NULL: the provider's default."""
    max_tokens: int | None = None
    """The answer's room; NULL: the configuration's."""
    is_default: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, default=False, server_default="0")
    )
    """New conversations of the user start with it."""
    created_at: datetime = Field(
        default_factory=utcnow,
        sa_column=Column(DateTime(timezone=True), nullable=False, default=utcnow),
    )


FIELDS = ("name", "configuration", "system_prompt", "temperature", "max_tokens", "is_default")
"""What the API reads and writes of a preset, besides its id."""


@dataclass(frozen=True, slots=True)
class PresetValues:
    """A preset's settings, checked."""

    name: str
    configuration: str
    system_prompt: str
    temperature: float | None
    max_tokens: int | None
    is_default: bool


def as_columns(values: PresetValues | Preset) -> dict[str, Any]:
    """The API's fields of checked values or of a stored preset, as columns take them."""
    return {field: getattr(values, field) for field in FIELDS}


_NOT_FOUND = "no such preset"
COLUMNS = tuple(inspect(Preset).columns)


def user_of(owner: str) -> int:
    """The user id an owner key stands for; presets are for signed-in users only."""
    user_id = owner_columns(owner).get("user_id")
    if user_id is None:
        raise NotFound(_NOT_FOUND)
    return user_id


def preset_dict(preset: Preset) -> dict[str, Any]:
    return {"id": preset.id, **as_columns(preset)}


def values_of(preset: Preset) -> PresetValues:
    return PresetValues(**as_columns(preset))


def one_preset(connection: Connection, *keys: ColumnElement[bool]) -> Preset | None:
    row = connection.execute(select(*COLUMNS).where(*keys)).first()
    return None if row is None else as_loaded(Preset, dict(row._mapping))


def owned_preset(connection: Connection, owner: str, preset_id: int) -> Preset:
    """The owner's preset (another user's is not found)."""
    if not 0 < preset_id < 2**31:
        raise NotFound(_NOT_FOUND)
    found = one_preset(
        connection, col(Preset.id) == preset_id, col(Preset.user_id) == user_of(owner)
    )
    if found is None:
        raise NotFound(_NOT_FOUND)
    return found


def preset_named(connection: Connection, owner: str, name: str) -> Preset | None:
    """The owner's preset of that name (the gateway's `preset:<name>`)."""
    user_id = owner_columns(owner).get("user_id")
    if user_id is None:
        return None
    return one_preset(connection, col(Preset.user_id) == user_id, col(Preset.name) == name)


def conversation_preset(connection: Connection, conversation: Conversation) -> Preset | None:
    """The preset a conversation's sends use: its owner's, while it exists."""
    if conversation.preset_id is None or conversation.user_id is None:
        return None
    return one_preset(
        connection,
        col(Preset.id) == conversation.preset_id,
        col(Preset.user_id) == conversation.user_id,
    )


def default_preset(connection: Connection, owner: str) -> Preset | None:
    user_id = owner_columns(owner).get("user_id")
    if user_id is None:
        return None
    return one_preset(connection, col(Preset.user_id) == user_id, col(Preset.is_default).is_(True))
