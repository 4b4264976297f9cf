"""Whether a send may go: the owner's rate limit and one answer at a time per conversation.
Both are checked inside the send's own transaction, from stored rows, so every worker
decides the same."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Connection, bindparam, func
from sqlmodel import col, select

from webapp.chat.models import EMBED_OWNER_PREFIX, Conversation, GatewayCall, Message, Role, Status
from webapp.chat.reaping import reap
from webapp.errors import Conflict, TooManyRequests
from webapp.settings import Settings
from webapp.timeutil import as_utc, utcnow

# Built once: on SQLite, building and caching a statement costs about as much as running it.
RECENT_SENDS = (
    select(Message.created_at)
    .where(
        # Every send touches its conversation, so only conversations touched inside the
        # window can hold sends inside it; each is read by (conversation_id, created_at).
        col(Message.conversation_id).in_(
            select(Conversation.id).where(
                col(Conversation.owner) == bindparam("owned_by"),
                col(Conversation.updated_at) > bindparam("since"),
            )
        ),
        col(Message.role) == Role.USER,
        col(Message.created_at) > bindparam("since"),
    )
    .order_by(col(Message.created_at))
    .limit(bindparam("limit"))
)
"""The owner's sends in the rate limit's window, oldest first, as many as the limit. (No
join: SQLite's RETURNING, where it is also counted, names columns without their table.)"""
RECENT_CALLS = (
    select(GatewayCall.called_at)
    .where(
        col(GatewayCall.owner) == bindparam("owned_by"),
        col(GatewayCall.called_at) > bindparam("since"),
    )
    .order_by(col(GatewayCall.called_at))
    .limit(bindparam("limit"))
)
"""The owner's gateway calls that stored no message: they count against the same limit."""
RECENT_COUNT: ColumnElement[int] = (
    select(func.count()).select_from(RECENT_SENDS.subquery()).scalar_subquery()
    + select(func.count()).select_from(RECENT_CALLS.subquery()).scalar_subquery()
)
"""Both counted, as one expression a send's first statement returns."""


def hold_budget(connection: Connection, owner: str) -> None:
    """Spend the owner's budget one transaction at a time, until this one ends. Every
    chat send and gateway call takes this lock before it counts: under PostgreSQL's READ
    COMMITTED, two sends in two conversations (each holding its own conversation's lock)
    would each count without the other and both go past the limit. SQLite needs nothing:
    its write transactions hold the database's write lock from their BEGIN."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"rate {owner}"))))


REFUSALS_KEPT = 10_000
"""Owners whose refusal this process remembers (embed visitors are many; the oldest go)."""


class Admission:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._refused_until: OrderedDict[str, float] = OrderedDict()

    def refused_lately(self, owner: str) -> bool:
        """Whether this process refused the owner a send whose wait is not over: only a
        hint (the send's transaction decides), so that a send sure to be refused does not
        first ask the engine to count its message."""
        until = self._refused_until.get(owner)
        return until is not None and time.monotonic() < until

    def remember_refusal(self, owner: str, refused: TooManyRequests) -> None:
        self._refused_until[owner] = time.monotonic() + refused.retry_after
        self._refused_until.move_to_end(owner)
        if len(self._refused_until) > REFUSALS_KEPT:
            self._refused_until.popitem(last=False)

    def rate_limit_for(self, owner: str) -> int:
        if owner.startswith(EMBED_OWNER_PREFIX):
            return self._settings.embed_rate_limit_messages
        return self._settings.rate_limit_messages

    @property
    def window(self) -> float:
        return self._settings.rate_limit_window

    def refuse_too_many(
        self, connection: Connection, owner: str, limit: int, now: datetime
    ) -> None:
        """The owner has sent `limit` messages (or gateway calls) within the window: say
        when enough of them leave it."""
        window = self.window
        since = now - timedelta(seconds=window)
        params = {"owned_by": owner, "since": since, "limit": limit}
        times = sorted(
            as_utc(t)
            for statement in (RECENT_SENDS, RECENT_CALLS)
            for t in connection.execute(statement, params).scalars()
        )
        # Sends may go on once enough of them have left the window to be under the limit.
        leaving = times[len(times) - limit] if len(times) >= limit else None
        wait = max(1, math.ceil((leaving - since).total_seconds())) if leaving else 1
        raise TooManyRequests(
            f"You have sent {limit} messages in the last {window:g} seconds; "
            f"try again in {wait} seconds.",
            retry_after=wait,
        )

    def refuse_if_busy(self, connection: Connection, conversation_id: str) -> None:
        """One answer at a time per conversation; an answer whose writer died is reaped."""
        streaming = connection.execute(
            select(Message.updated_at).where(
                Message.conversation_id == conversation_id,
                Message.status == Status.STREAMING,
            )
        )
        heartbeats = [as_utc(updated) for updated in streaming.scalars()]
        after = self._settings.stale_stream_after
        cutoff = utcnow() - timedelta(seconds=after)
        if any(beat >= cutoff for beat in heartbeats):
            raise Conflict(
                "an answer is still being written in this conversation; "
                "wait for it or stop it first"
            )
        if heartbeats:
            reap(connection, conversation_id, after)
