"""Where files are kept: their bytes once per owner and content hash (`FileBlob`), each
upload's name and what was learned of it (`StoredFile`), and which message carries which
file, in order (`MessageFile`).

The bytes live in the database, so every app server of one database sees them; a blob is
shared by every upload of the same content by the same owner (never across owners, so a
hash reveals nothing of anyone else's files), and goes when its last upload does.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import (
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlmodel import Field, SQLModel

from webapp.chat.stored.models import JSON_TYPE
from webapp.timeutil import utcnow


def new_file_id() -> str:
    """128 random bits, URL-safe: a file's id says nothing of how many there are."""
    return secrets.token_urlsafe(16)


def _user_key() -> Column[int]:
    return Column(Integer, ForeignKey("user_account.id", ondelete="CASCADE"), nullable=True)


class FileBlob(SQLModel, table=True):
    __tablename__ = "file_blob"
    __table_args__ = (UniqueConstraint("owner", "sha256", name="uq_file_blob_owner_sha256"),)

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(max_length=100)
    user_id: int | None = Field(default=None, sa_column=_user_key())
    sha256: str = Field(max_length=64)
    size: int
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class StoredFile(SQLModel, table=True):
    __tablename__ = "stored_file"
    __table_args__ = (Index("ix_stored_file_owner", "owner"),)

    id: str = Field(default_factory=new_file_id, primary_key=True, max_length=32)
    owner: str = Field(max_length=100)
    user_id: int | None = Field(default=None, sa_column=_user_key())
    blob_id: int = Field(
        sa_column=Column(
            Integer, ForeignKey("file_blob.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    name: str = Field(max_length=255)
    media_type: str = Field(max_length=100)
    kind: str = Field(max_length=16)
    """`text`, `document` (a PDF, sent as its text) or `image`."""
    size: int
    sha256: str = Field(max_length=64)
    width: int | None = None
    height: int | None = None
    text: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """A text file's or a document's text, as the model reads it; NULL for an image."""
    token_counts: dict[str, int] | None = Field(
        default=None, sa_column=Column(JSON_TYPE, nullable=True)
    )
    """Tokens by counting rule (a tokenizer id, or a provider's image rule), counted once."""
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )


class MessageFile(SQLModel, table=True):
    """A message's files, in the order they were attached. A file a message uses is not
    deleted (`store.delete_file` refuses, 409); deleting the message frees it. The keys
    cascade for what goes with its user: their messages and their files at once."""

    __tablename__ = "message_file"

    message_id: int = Field(
        sa_column=Column(Integer, ForeignKey("message.id", ondelete="CASCADE"), primary_key=True)
    )
    position: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    file_id: str = Field(
        sa_column=Column(
            String(32),
            ForeignKey("stored_file.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        )
    )
