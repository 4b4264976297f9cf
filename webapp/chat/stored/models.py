"""The conversation log: conversations and their messages, never shortened.

A message row is the audit record of one side of a turn. The user row carries
the facts of the bound that was applied when it was sent (written before the
provider is called, so a failed call keeps them); the assistant row carries
what the provider reported.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from webapp.timeutil import utcnow


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    """A tool call's result, a row of the turn whose answer called it (see `tool_calls`)."""


class Status(StrEnum):
    COMPLETE = "complete"
    STREAMING = "streaming"
    STOPPED = "stopped"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


REPLAYABLE = (Status.COMPLETE, Status.STOPPED, Status.INTERRUPTED)
"""Answers the model sees again on later sends; a failed answer is kept but not replayed."""
RETRYABLE = (Status.FAILED, Status.INTERRUPTED)
"""Answers whose turn may be sent again (the page offers "Retry" on exactly these)."""


def new_conversation_id() -> str:
    """128 random bits, URL-safe: ids are unguessable, so they never leak a count."""
    return secrets.token_urlsafe(16)


JSON_TYPE = JSON().with_variant(JSONB(), "postgresql")
"""JSON on SQLite, JSONB on PostgreSQL; both index into it with `column[key]`."""
NULLABLE_JSON = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""The same, with Python's None stored as SQL NULL (not JSON `null`), so that a query
can tell rows without a value by `IS NULL`."""


def _timestamp() -> Column[datetime]:
    return Column(DateTime(timezone=True), nullable=False, default=utcnow)


OWNER_KEYS_RULE = (
    "((user_id IS NULL AND owner NOT LIKE 'user:%') OR (user_id IS NOT NULL AND "
    "owner = 'user:' || CAST(user_id AS VARCHAR(20)))) AND "
    "((embed_name IS NULL AND visitor IS NULL AND owner NOT LIKE 'embed:%') OR "
    "(embed_name IS NOT NULL AND visitor IS NOT NULL AND "
    "owner = 'embed:' || embed_name || ':' || visitor))"
)
"""The database's own guarantee that `owner` (what look-ups compare) and the keys agree:
no row says `user:N` without a foreign key to user N, none says `embed:...` without the
embed's name and the visitor. (Other owner strings are the service's own business.)"""


class Conversation(SQLModel, table=True):
    __table_args__ = (
        Index("ix_conversation_owner_updated", "owner", "updated_at"),
        Index("ix_conversation_user_id", "user_id"),
        Index("ix_conversation_owner_listed", "owner", "archived", "pinned", "updated_at"),
        CheckConstraint(OWNER_KEYS_RULE, name="ck_conversation_owner_keys"),
    )

    id: str = Field(default_factory=new_conversation_id, primary_key=True, max_length=32)
    owner: str = Field(max_length=100)
    """`user:<id>`, `embed:<name>:<visitor>`: what ownership checks compare, one string
    for both kinds; `owner_columns` gives the keys it stands for."""
    user_id: int | None = Field(
        default=None,
        sa_column=Column(Integer, ForeignKey("user_account.id", ondelete="CASCADE"), nullable=True),
    )
    embed_name: str | None = Field(default=None, max_length=100)
    visitor: str | None = Field(default=None, max_length=64)
    configuration: str = Field(max_length=100)
    title: str = Field(default="New conversation", max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    active_seq: int | None = None
    """The newest row of the branch being shown and continued; NULL while that is the
    conversation's newest row, as it is after every send (see chat.history)."""
    cut_reset: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default="0")
    )
    """A pin, an unpin, a configuration or branch switch since the last send: the next
    send starts its cut afresh instead of keeping the previous send's (see llm.window)."""
    pinned: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, default=False, server_default="0")
    )
    """Listed above the others in the sidebar and `GET /api/conversations`."""
    archived: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, default=False, server_default="0")
    )
    """Kept, searchable, but out of the sidebar's list until unarchived."""
    kind: str = Field(
        default="original",
        sa_column=Column(String(8), nullable=False, default="original", server_default="original"),
    )
    """Where it came from: `original`, `fork` or `import` (`organising.Kind`); unlike the
    title's mark, a rename never loses it."""
    preset_id: int | None = Field(
        default=None,
        sa_column=Column(
            Integer,
            ForeignKey("preset.id", ondelete="SET NULL", name="fk_conversation_preset_id"),
            nullable=True,
        ),
    )
    """The owner's preset the sends use (`webapp.chat.presets`); deleting it leaves the
    conversation on its configuration alone."""
    summarize: bool | None = None
    """Whether sends carry a summary of what the cut left out: NULL follows the
    configuration's `summarize`, true or false is the owner's choice for this one."""


class Message(SQLModel, table=True):
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq", name="uq_message_conversation_seq"),
        Index("ix_message_conversation_status", "conversation_id", "status"),
        Index("ix_message_status_updated", "status", "updated_at"),
        Index("ix_message_created_at", "created_at"),
        Index("ix_message_conversation_created", "conversation_id", "created_at"),
        Index("ix_message_prior_turns", "conversation_id", "prior_turns", "seq"),
        Index(
            "ix_message_pinned",
            "conversation_id",
            "seq",
            sqlite_where=text("pinned = 1"),
            postgresql_where=text("pinned"),
        ),
        Index(
            "ix_message_run_start",
            "conversation_id",
            "seq",
            sqlite_where=text("parent_seq IS NOT NULL"),
            postgresql_where=text("parent_seq IS NOT NULL"),
        ),
        Index("ix_message_parent", "conversation_id", "parent_seq"),
    )

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: str = Field(
        sa_column=Column(
            String(32), ForeignKey("conversation.id", ondelete="CASCADE"), nullable=False
        )
    )
    seq: int
    role: str = Field(max_length=16)
    parent_seq: int | None = None
    """Set on the first row of a run only: the seq of the row it continues (0: it starts
    at the root). A row without it continues the row before it (see chat.history)."""
    content: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    content_html: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """An answer's markdown rendered and sanitized once, when it was finished: pages of
    long conversations show it without rendering again."""
    status: str = Field(default=Status.COMPLETE, max_length=16)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    estimated_tokens: int = 0
    prior_turns: int | None = None
    """On user rows: how many replayable turns came before this one (see chat.history)."""
    turn_number: int | None = None
    """On user rows: the turn's place on its branch, from 1, failed turns counted (unlike
    `prior_turns`, which counts what a send can replay): what the page names its controls
    by ("Pin turn 3"), so two turns never share a name. NULL on rows from before it."""
    token_counts: dict[str, int] | None = Field(
        default=None, sa_column=Column(JSON_TYPE, nullable=True)
    )
    """Content tokens by tokenizer id (see webapp.llm.counting), counted once, when the
    row is written or first needed: a send never counts old history again."""
    pinned: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, default=False, server_default="0")
    )
    """On user rows: the user asked that this turn be sent on every later send."""

    # The bound, on user rows. dropped_turns: NULL = no fit evaluated, 0 = all sent, N = N left out.
    dropped_turns: int | None = None
    fit_model: str | None = Field(default=None, max_length=100)
    fit_window: int | None = None
    fit_reserve: int | None = None
    fit_budget: int | None = None
    fit_estimated_tokens: int | None = None
    fit_overflow_at_floor: bool | None = None
    fit_counted_by: str | None = Field(default=None, max_length=300)
    fit_left_out: list[list[int]] | None = Field(
        default=None, sa_column=Column(JSON_TYPE, nullable=True)
    )
    """Inclusive [first_seq, last_seq] spans of what the send left out, stored when it
    was sent (and rewritten on a re-fit): the record never depends on today's rule."""
    fit_pins_dropped: int | None = None
    fit_trim_to: float | None = None
    fit_cut_moved: bool | None = None
    fit_summary: int | None = None
    """The version of the summary the send carried (NULL: none; see `Summary`)."""
    fit_instructions_tokens: int | None = None
    """Estimated tokens of the owner's custom instructions, sent with the system prompt in
    the head (NULL: the send carried none)."""
    fit_cleared: list[dict[str, int]] | None = Field(
        default=None, sa_column=Column(NULLABLE_JSON, nullable=True)
    )
    """`[{first_seq, last_seq, tokens}]`: runs of tool results the send's request carried
    as one-line stubs (`webapp.llm.clearing`); NULL when it cleared none."""
    fit_attachments: dict[str, list[str]] | None = Field(
        default=None, sa_column=Column(JSON_TYPE, nullable=True)
    )
    """`{"sent": [file id, ...], "left_out": [...]}`: the files the send carried with the
    turns it sent, and those it left out with theirs (NULL: it carried none)."""
    attachments: list[dict[str, Any]] | None = Field(
        default=None, sa_column=Column(JSON_TYPE, nullable=True)
    )
    """On user rows: the files the message carried, as sent (id, name, media_type, size,
    kind, token_counts by model); NULL without any. The bytes are in `stored_file`."""

    # What the provider said, on assistant rows.
    model: str | None = Field(default=None, max_length=100)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens the engine said it served from its prompt cache (NULL: it did not say)."""
    evaluated_tokens: int | None = None
    """Prompt tokens the engine evaluated, as it said them or as its prompt less its cache
    hits (NULL: it said neither)."""
    cache_write_tokens: int | None = None
    """Prompt tokens the engine said it wrote to its cache (NULL: it did not say)."""
    finish_reason: str | None = Field(default=None, max_length=32)
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    feedback: int | None = Field(default=None, sa_column=Column(SmallInteger, nullable=True))
    """On assistant rows: the owner's thumbs up (1) or down (-1); NULL when not rated."""

    # Tool calls. A turn that called tools keeps, after its answer's row (written first,
    # when the send was stored), one assistant row per model step that called tools, with
    # `tool_calls`, and one `tool` row per result, in the order they happened; the model
    # is sent them in that order before the answer (`webapp.chat.stored.history`).
    tool_calls: list[dict[str, str]] | None = Field(
        default=None, sa_column=Column(NULLABLE_JSON, nullable=True)
    )
    """On an assistant row of a tool step: `[{id, name, arguments}]` as the model asked."""
    tool_call_id: str | None = Field(default=None, sa_column=Column(String(200), nullable=True))
    """On a tool row: the call it answers."""
    tool_name: str | None = Field(default=None, sa_column=Column(String(200), nullable=True))
    """On a tool row: the tool that ran (`name` in the JSON). Its `status` is the call's
    outcome: ok, error, failed, timeout or denied (`webapp.tools.outcomes.Status`)."""


MESSAGE_DEFAULTS: dict[str, object] = {
    name: field.default
    for name, field in Message.model_fields.items()
    if name != "id" and field.default_factory is None and not field.is_required()
}
"""Every column a new message row may leave out, with its default: what an INSERT of a
row built from it (plus the required columns) stores."""


class GatewayCall(SQLModel, table=True):
    """One spending of an owner's budget: a chat send, a gateway call that stored no
    message, an import (see `webapp.chat.stored.budget`). Owner, time, kind and size, nothing
    of the content: the limits count these rows, which deleting conversations does not
    touch. (The table kept its first name, from when it held gateway calls only.)
    """

    __tablename__ = "gateway_call"
    __table_args__ = (
        Index("ix_gateway_call_owner_time", "owner", "called_at"),
        Index("ix_gateway_call_time", "called_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(max_length=100)
    called_at: datetime = Field(
        sa_column=Column(DateTime(timezone=True), nullable=False, default=utcnow)
    )
    kind: str = Field(
        default="call", sa_column=Column(String(16), nullable=False, server_default="call")
    )
    """`send`, `call` or `import` (`budget.Use`)."""
    size: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    """An import's size in bytes (0 for the others)."""


class Summary(SQLModel, table=True):
    """One version of the summary of what the cut left out of a branch
    (`webapp.llm.summaries`). It covers the rows [first_seq, last_seq] of the branch it was
    written on, so it applies to every branch through `last_seq`: an edit of a covered turn
    starts a branch that does not pass through it, and never sees it. Rows are never
    changed but by the owner's edit of the newest (`edited`)."""

    __table_args__ = (Index("ix_summary_conversation_version", "conversation_id", "version"),)

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: str = Field(
        sa_column=Column(
            String(32), ForeignKey("conversation.id", ondelete="CASCADE"), nullable=False
        )
    )
    version: int
    """One more than the newest version on its branch when it was written."""
    first_seq: int
    last_seq: int
    content: str = Field(sa_column=Column(Text, nullable=False))
    model: str | None = Field(default=None, max_length=100)
    """The model that wrote it."""
    tokens: int = 0
    """Its length: the call's completion tokens, else the estimate."""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    evaluated_tokens: int | None = None
    """The summary call's prompt, and what the engine served from its cache and evaluated."""
    created_at: datetime = Field(default_factory=utcnow, sa_column=_timestamp())
    edited: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, default=False, server_default="0")
    )
    fallback: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, default=False, server_default="0")
    )
    """Written by the uncached fallback call (the replayed request could not fit the window):
    its prompt was the previous summary and the turns left out, not the engine's cache."""
