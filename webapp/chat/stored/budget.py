"""What an owner spends: messages (chat sends and gateway calls, against the rate limit)
and imports (per window, by count and bytes). How a window's rows become a wait, and the
lock, are `webapp.limits`'s; whether one send may go is `webapp.chat.send`'s.

Every spending of the message budget (a chat send, a gateway call) and every import
leaves a row in `gateway_call` (owner, time, kind, size): the limits count those rows,
so deleting conversations gives nothing back. They are counted inside the spending's
own transaction, under the owner's lock, so every worker decides the same. Rows older
than their window are deleted now and then, by whichever worker comes first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import ColumnElement, Connection, bindparam, delete, func, insert, literal_column
from sqlmodel import Session, col, select

from webapp.chat.stored.models import GatewayCall
from webapp.db import Database
from webapp.errors import InvalidInput, TooManyRequests
from webapp.limits import SlidingWindow, advisory_lock, try_advisory_lock
from webapp.prepared import Prepared
from webapp.settings import Settings
from webapp.timeutil import utcnow


class Use(StrEnum):
    """What a row of `gateway_call` records."""

    SEND = "send"
    """A chat send (a message stored, also through the gateway's `x-conversation-id`)."""
    CALL = "call"
    """A gateway call that stored no message."""
    IMPORT = "import"
    """An imported conversation (`size`: its bytes)."""
    SUMMARY = "summary"
    """A summary call of a conversation's (`size`: its prompt tokens); not a message."""


MESSAGE_USES = (Use.SEND, Use.CALL)
"""What the rate limit (`WEBAPP_RATE_LIMIT_MESSAGES`) counts: both, wherever it is checked."""
_SPENDS_MESSAGES = col(GatewayCall.kind).in_([literal_column(f"'{use}'") for use in MESSAGE_USES])

# Built once: on SQLite, building and caching a statement costs about as much as running it.
RECENT_USES = (
    select(GatewayCall.called_at)
    .where(
        col(GatewayCall.owner) == bindparam("owned_by"),
        _SPENDS_MESSAGES,
        col(GatewayCall.called_at) > bindparam("since"),
    )
    .order_by(col(GatewayCall.called_at).desc())
    .limit(bindparam("limit"))
)
"""The owner's newest sends and gateway calls in the rate limit's window, as many as the
limit (read by `ix_gateway_call_owner_time`)."""
RECENT_COUNT: ColumnElement[int] = (
    select(func.count()).select_from(RECENT_USES.subquery()).scalar_subquery()
)
"""Their count, as one expression a send's first statement returns."""
_RECORD_USE = Prepared(
    insert(GatewayCall).values(
        owner=bindparam("owner"),
        called_at=bindparam("at"),
        kind=bindparam("kind"),
        size=bindparam("size"),
    )
)


def record_use(connection: Connection, owner: str, use: Use, at: datetime, size: int = 0) -> None:
    """Count one spending of the owner's budget (in the spending's own transaction)."""
    _RECORD_USE.rows(connection, {"owner": owner, "at": at, "kind": use.value, "size": size})


def message_budget_wait(
    connection: Connection, owner: str, limit: int, window: float, now: datetime
) -> int | None:
    """None while the owner's sends and gateway calls in the window are fewer than
    `limit`; else the seconds until enough of them have left it."""
    sliding = SlidingWindow.of_seconds(window)
    values = {"owned_by": owner, "since": sliding.start(now), "limit": limit}
    newest = connection.execute(RECENT_USES, values).scalars().all()
    # The send may go once `limit - 1` are the only ones left in the window.
    return sliding.wait(newest, limit - 1, now)


_PRUNED: dict[tuple[Use, ...], float] = {}
"""When this process last deleted the rows of each budget that left their window."""


def prune_uses(connection: Connection, uses: Sequence[Use], window: float, now: datetime) -> None:
    """Delete every owner's rows of `uses` older than `window`, at most once per window
    in this process (counting never needs it: it reads only the window; this keeps the
    table at about two windows' worth of rows, embed visitors who never come back
    included). On PostgreSQL only one transaction prunes at a time, the others skip:
    two deleting the same rows in different orders could deadlock."""
    key = tuple(uses)
    clock = time.monotonic()
    last = _PRUNED.get(key)
    if last is not None and clock - last < window:
        return
    _PRUNED[key] = clock
    if not try_advisory_lock(connection, "prune gateway_call"):
        return
    connection.execute(
        delete(GatewayCall).where(
            col(GatewayCall.kind).in_([use.value for use in uses]),
            col(GatewayCall.called_at) <= now - timedelta(seconds=window),
        )
    )


def hold_budget(connection: Connection, owner: str) -> None:
    """Spend the owner's budget one transaction at a time, until this one ends. Every
    chat send and gateway call takes this lock before it counts: under PostgreSQL's READ
    COMMITTED, two sends in two conversations (each holding its own conversation's lock)
    would each count without the other and both go past the limit."""
    advisory_lock(connection, f"rate {owner}")


class ImportQuota:
    """Imports per owner and window, by count and by bytes (`WEBAPP_IMPORT_*`): an import
    stores what the file holds, at no cost to the model server, so the message budget
    does not bound it. Counted before the file is read into a conversation (an import
    refused as invalid counts all the same: it was work)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self.count = settings.import_limit
        self.size = settings.import_limit_bytes
        self.window = settings.import_window

    async def take(self, owner: str, size: int) -> None:
        """Count an import of `size` bytes, or refuse it (429 with Retry-After)."""
        if self.count <= 0 and self.size <= 0:
            return
        if 0 < self.size < size:
            raise InvalidInput(f"an import is at most {self.size:,} bytes; this one is {size:,}")
        await self._db.write(self._take, owner, size, utcnow())

    def _take(self, session: Session, owner: str, size: int, now: datetime) -> None:
        connection = session.connection()
        hold_budget(connection, owner)
        window = SlidingWindow.of_seconds(self.window)
        since = window.start(now)
        newest = connection.execute(
            select(col(GatewayCall.called_at), col(GatewayCall.size))
            .where(
                col(GatewayCall.owner) == owner,
                col(GatewayCall.kind) == Use.IMPORT.value,
                col(GatewayCall.called_at) > since,
            )
            .order_by(col(GatewayCall.called_at).desc())
        ).all()
        # The import may go once the newest that leave room are the only ones left.
        keep = len(newest)
        if self.count > 0:
            keep = min(keep, self.count - 1)
        if self.size > 0:
            total = size
            for index, (_, spent) in enumerate(newest[:keep]):
                total += spent
                if total > self.size:
                    keep = index
                    break
        wait = window.wait([at for at, _ in newest], keep, now)
        if wait is not None:
            used = sum(spent for _, spent in newest)
            raise TooManyRequests(
                f"You have imported {len(newest)} conversations ({used:,} bytes) in the "
                f"last {self.window:g} seconds; try again in {wait} seconds.",
                retry_after=wait,
            )
        record_use(connection, owner, Use.IMPORT, now, size)
        prune_uses(connection, (Use.IMPORT,), self.window, now)
