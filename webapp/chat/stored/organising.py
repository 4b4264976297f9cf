"""Keeping conversations in order: pinned on top, archived out of the way, tags to filter
by, and where each came from (`Kind`). The rules about tags live here: what a tag may
be, how many a conversation holds, and how they are stored and read back."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Literal

from sqlalchemy import Column, Connection, Exists, ForeignKey, Index, String, delete, insert
from sqlmodel import Field, SQLModel, col, select

from webapp.chat.stored.models import Conversation
from webapp.chat.stored.titles import FORK_MARK, IMPORT_MARK
from webapp.errors import InvalidInput, refuse_nul


class Kind(StrEnum):
    """Where a conversation came from, said by the API, the sidebar and search hits."""

    ORIGINAL = "original"
    FORK = "fork"
    IMPORT = "import"


def kind_mark(kind: str) -> str | None:
    """The word a fork's or an import's row is tagged with (the title's mark, `titles`),
    None for an original: one word wherever a page says where a conversation came from."""
    return {Kind.FORK: FORK_MARK, Kind.IMPORT: IMPORT_MARK}.get(Kind(kind))


TAG_MAX = 32
"""Characters of one tag."""
TAGS_MAX = 10
"""Tags on one conversation."""
BULK_MAX = 500
"""Conversations one bulk action names."""
BulkAction = Literal["archive", "unarchive", "delete"]


class ConversationTag(SQLModel, table=True):
    """One tag on one conversation; a conversation's tags go with it when it is deleted."""

    __tablename__ = "conversation_tag"
    __table_args__ = (Index("ix_conversation_tag_tag", "tag"),)

    conversation_id: str = Field(
        sa_column=Column(
            String(32),
            ForeignKey("conversation.id", ondelete="CASCADE"),
            primary_key=True,
            nullable=False,
        )
    )
    tag: str = Field(sa_column=Column(String(TAG_MAX), primary_key=True, nullable=False))


def clean_tag(tag: object) -> str:
    """A tag as stored: its whitespace collapsed, lower case; a clear error otherwise.
    Markup is kept as typed (pages escape it), never refused or rewritten."""
    if not isinstance(tag, str):
        raise InvalidInput("a tag is a string")
    cleaned = " ".join(refuse_nul(tag, "a tag").split()).lower()
    if not cleaned:
        raise InvalidInput("a tag is empty")
    if len(cleaned) > TAG_MAX:
        raise InvalidInput(f"a tag is at most {TAG_MAX} characters; {cleaned[:40]!r} is longer")
    return cleaned


def clean_tags(tags: Iterable[object]) -> list[str]:
    """A conversation's whole set of tags, each cleaned, duplicates once, in order."""
    cleaned = list(dict.fromkeys(clean_tag(tag) for tag in tags))
    if len(cleaned) > TAGS_MAX:
        raise InvalidInput(f"a conversation has at most {TAGS_MAX} tags; {len(cleaned)} given")
    return cleaned


def set_tags(connection: Connection, conversation_id: str, tags: list[str]) -> None:
    """Replace the conversation's tags by `tags` (already cleaned)."""
    connection.execute(
        delete(ConversationTag).where(col(ConversationTag.conversation_id) == conversation_id)
    )
    if tags:
        connection.execute(
            insert(ConversationTag),
            [{"conversation_id": conversation_id, "tag": tag} for tag in tags],
        )


def tags_of(connection: Connection, conversation_ids: Iterable[str]) -> dict[str, list[str]]:
    """Each conversation's tags, in alphabetical order (conversations without any: absent)."""
    ids = list(conversation_ids)
    if not ids:
        return {}
    rows = connection.execute(
        select(ConversationTag.conversation_id, ConversationTag.tag)
        .where(col(ConversationTag.conversation_id).in_(ids))
        .order_by(col(ConversationTag.tag))
    ).all()
    found: dict[str, list[str]] = {}
    for conversation_id, tag in rows:
        found.setdefault(conversation_id, []).append(tag)
    return found


def tagged(tag: str) -> Exists:
    """A condition on conversations: they carry `tag` (cleaned)."""
    return (
        select(ConversationTag.conversation_id)
        .where(
            col(ConversationTag.conversation_id) == Conversation.id,
            col(ConversationTag.tag) == tag,
        )
        .exists()
    )
