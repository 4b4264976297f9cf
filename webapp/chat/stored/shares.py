"""Read-only links to a conversation as it stood when shared (`/s/{token}`).

A link's token is 256 random bits, shown once to its owner and stored only as its SHA-256:
someone who reads the database cannot open the links, and a look-up by hash compares no
secret. A share records the branch it shows by its newest row (`upto_seq`): rows are never
rewritten, so later sends, edits and branch switches do not change what the link shows.
Deleting the share revokes it; deleting the conversation deletes its shares.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import Boolean, Column, DateTime, ForeignKey, Index, String
from sqlmodel import Field, SQLModel

from webapp.chat.stored.models import new_conversation_id
from webapp.timeutil import utcnow

SHARE_PATH = "/s/"


class Share(SQLModel, table=True):
    __table_args__ = (Index("ix_share_owner_created", "owner", "created_at"),)

    id: str = Field(default_factory=new_conversation_id, primary_key=True, max_length=32)
    token_hash: str = Field(sa_column=Column(String(64), nullable=False, unique=True))
    conversation_id: str = Field(
        sa_column=Column(
            String(32), ForeignKey("conversation.id", ondelete="CASCADE"), nullable=False
        )
    )
    owner: str = Field(max_length=100)
    upto_seq: int
    """The newest row of the branch shared: the link shows that branch up to it."""
    title: str = Field(max_length=200)
    """The title when shared (a later rename is not shown)."""
    author: str | None = Field(default=None, max_length=100)
    """The owner's name, only when they chose to show it."""
    with_attachments: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default="0")
    )
    """Attached files' text shown; without it the page says only that a file was attached."""
    created_at: datetime = Field(
        default_factory=utcnow,
        sa_column=Column(DateTime(timezone=True), nullable=False, default=utcnow),
    )


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def share_url(token: str) -> str:
    return SHARE_PATH + token
