"""What the embed stores besides conversations: its recent sends, for the quotas."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, DateTime, Index
from sqlmodel import Field, SQLModel

from webapp.timeutil import utcnow

CLIENT_MAX_LENGTH = 64


class EmbedSend(SQLModel, table=True):
    """One message sent (or retried) through an embed, by which client address. Kept for
    the rate limit's window only. A visitor id is free to change (a new one comes with
    every cookie-less page load), a client address much less so: these rows are what
    the per-address and per-embed limits count."""

    __tablename__ = "embed_send"
    __table_args__ = (
        Index("ix_embed_send_embed_client_time", "embed_name", "client", "sent_at"),
        Index("ix_embed_send_embed_time", "embed_name", "sent_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    embed_name: str = Field(max_length=100)
    client: str = Field(default="", max_length=CLIENT_MAX_LENGTH)
    sent_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )
