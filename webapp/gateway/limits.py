"""The per-user rate limit, for gateway calls.

Every chat send and every gateway call without `x-conversation-id` leaves a row in
`gateway_call` (owner, time and kind, nothing of its content; see
`webapp.chat.stored.budget`, whose rule this is). Both kinds count against the one limit
the chat uses (`WEBAPP_RATE_LIMIT_MESSAGES` per `WEBAPP_RATE_LIMIT_WINDOW`): a gateway
call is refused when the caller's gateway calls and chat sends in the window reach it.
Rows are in the database, so every worker (and every machine on PostgreSQL) counts
the same, and deleting conversations gives nothing back.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from webapp.chat.stored.budget import (
    MESSAGE_USES,
    Use,
    hold_budget,
    message_budget_wait,
    prune_uses,
    record_use,
)
from webapp.db import Database
from webapp.gateway.errors import too_many
from webapp.timeutil import utcnow


class RateLimit:
    def __init__(self, db: Database, limit: int, window: float) -> None:
        self.db = db
        self.limit = limit
        self.window = window

    async def admit(self, owner: str, *, record: bool = True) -> None:
        """Count this call, or refuse it (429 with Retry-After) and count nothing. A call
        that will store a message (`record=False`) is only checked: its send counts."""
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
        wait = message_budget_wait(connection, owner, self.limit, self.window, now)
        if wait is None and record:
            record_use(connection, owner, Use.CALL, now)
            prune_uses(connection, MESSAGE_USES, self.window, now)
        return wait
