"""The gateway's admission: every /v1 call goes through the chat's one admission
(`webapp.chat.sending.admission`), whose rule this is.

Every chat send and every gateway call without `x-conversation-id` leaves a row in
`gateway_call` (owner, time and kind, nothing of its content; see
`webapp.chat.stored.budget`). Both kinds count against the one limit the chat uses
(`WEBAPP_RATE_LIMIT_MESSAGES` per `WEBAPP_RATE_LIMIT_WINDOW`): a gateway call is refused
when the caller's gateway calls and chat sends in the window reach it. Rows are in the
database, so every worker (and every machine on PostgreSQL) counts the same, and
deleting conversations gives nothing back.
"""

from __future__ import annotations

from sqlmodel import Session

from webapp.chat.sending.admission import Admission
from webapp.db import Database
from webapp.timeutil import utcnow


class RateLimit:
    def __init__(self, db: Database, admission: Admission) -> None:
        self.db = db
        self.admission = admission

    async def admit(self, owner: str, *, record: bool = True) -> None:
        """Count this call, or refuse it (429 with Retry-After) and count nothing. A call
        that will store a message (`record=False`) is only checked: its send counts."""
        if not self.admission.counts(owner):
            return
        await self.db.write(self._admit, owner, record)

    def _admit(self, session: Session, owner: str, record: bool) -> None:
        self.admission.admit_call(session.connection(), owner, utcnow(), record=record)
