"""The per-user rate limit, for gateway calls that store no message.

A chat send is counted from the stored messages themselves; a gateway call without
`x-conversation-id` stores none, so it leaves a row of its own here (owner and time,
nothing of its content). Both kinds count against the one limit the chat uses
(`WEBAPP_RATE_LIMIT_MESSAGES` per `WEBAPP_RATE_LIMIT_WINDOW`): a gateway call is
refused when the caller's gateway calls and chat sends in the window reach it.
Rows are in the database, so every worker (and every machine on PostgreSQL) counts
the same; each owner's rows older than the window are deleted as their next call is
counted, so the table holds at most a window's worth of calls.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, insert, select
from sqlmodel import Session, col

from webapp.chat.admission import hold_budget
from webapp.chat.models import Conversation, GatewayCall, Message, Role
from webapp.db import Database
from webapp.gateway.errors import too_many
from webapp.timeutil import as_utc, utcnow


def _newest(connection: Connection, owner: str, since: datetime, limit: int) -> list[datetime]:
    """The owner's newest `limit` counted calls and chat sends in the window, newest first."""
    calls = connection.execute(
        select(col(GatewayCall.called_at))
        .where(col(GatewayCall.owner) == owner, col(GatewayCall.called_at) > since)
        .order_by(col(GatewayCall.called_at).desc())
        .limit(limit)
    ).scalars()
    sends = connection.execute(
        select(col(Message.created_at))
        .where(
            col(Message.conversation_id).in_(
                select(col(Conversation.id)).where(
                    col(Conversation.owner) == owner, col(Conversation.updated_at) > since
                )
            ),
            col(Message.role) == Role.USER,
            col(Message.created_at) > since,
        )
        .order_by(col(Message.created_at).desc())
        .limit(limit)
    ).scalars()
    return sorted((as_utc(t) for t in [*calls, *sends]), reverse=True)[:limit]


class RateLimit:
    def __init__(self, db: Database, limit: int, window: float) -> None:
        self.db = db
        self.limit = limit
        self.window = window

    async def admit(self, owner: str, *, record: bool = True) -> None:
        """Count this call, or refuse it (429 with Retry-After) and count nothing. A call
        that will store a message (`record=False`) is only checked: its message counts."""
        if self.limit <= 0:
            return
        wait = await self.db.write(self._admit, owner, utcnow(), record)
        if wait is not None:
            raise too_many(
                f"You have made {self.limit} calls in the last {self.window:g} seconds; "
                f"try again in {wait} seconds.",
                wait,
            )

    def _admit(self, session: Session, owner: str, now: datetime, record: bool) -> int | None:
        connection = session.connection()
        hold_budget(connection, owner)
        since = now - timedelta(seconds=self.window)
        connection.execute(
            delete(GatewayCall).where(
                col(GatewayCall.owner) == owner, col(GatewayCall.called_at) <= since
            )
        )
        newest = _newest(connection, owner, since, self.limit)
        if len(newest) >= self.limit:
            # Once the limit-th newest leaves the window, fewer than `limit` remain in it.
            return max(1, math.ceil((newest[self.limit - 1] - since).total_seconds()))
        if record:
            connection.execute(insert(GatewayCall).values(owner=owner, called_at=now))
        return None
