"""Rate limits for anonymous embed visitors that changing cookies does not reset.

The per-visitor limit (the owner's rate limit in `webapp.chat.sending.admission`) counts
a visitor's own messages, but a visitor is whatever id the browser brings, and a browser
without cookies gets a new one with every page. So every send through an embed is also
counted per client address (as seen through the trusted proxies) and, as a ceiling on
what all visitors of one embed may cost together, per embed. `EmbedQuota` is one of the
admission's caller quotas: it counts in the send's own transaction, so whichever route
the send came by (send, edit, regenerate, retry, Continue) it is counted, and a send
refused for any reason counts nowhere. The counts live in the database, so every worker
sees the same.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, insert
from sqlmodel import col, select

from webapp.embed.models import CLIENT_MAX_LENGTH, EmbedSend
from webapp.errors import TooManyRequests
from webapp.limits import SlidingWindow, advisory_lock
from webapp.owners import EMBED_OWNER_PREFIX, owner_columns


class EmbedQuota:
    """The admission's quota for embed visitors (`CallerQuota`); other owners pass."""

    def __init__(self, *, per_client: int, per_embed: int, window: timedelta) -> None:
        self.per_client = per_client
        self.per_embed = per_embed
        self.window = window
        self._sliding = SlidingWindow(window)

    def take(self, connection: Connection, owner: str, address: str, now: datetime) -> None:
        """Count one send through the visitor's embed from `address`, or refuse it
        (TooManyRequests) when the address's or the embed's limit is already reached.
        PostgreSQL takes a lock per embed (SQLite's write transaction holds the database's):
        parallel sends cannot both see room for one."""
        if not owner.startswith(EMBED_OWNER_PREFIX):
            return
        if self.per_client <= 0 and self.per_embed <= 0:
            return
        embed_name = owner_columns(owner)["embed_name"]
        client = address[:CLIENT_MAX_LENGTH]
        advisory_lock(connection, f"embed-send {embed_name}")
        since = self._sliding.start(now)
        connection.execute(delete(EmbedSend).where(col(EmbedSend.sent_at) <= since))
        if self.per_client > 0:
            self._refuse_if_full(
                connection, now, self.per_client, "from your address", embed_name, client
            )
        if self.per_embed > 0:
            self._refuse_if_full(connection, now, self.per_embed, "through this chat", embed_name)
        connection.execute(
            insert(EmbedSend).values(embed_name=embed_name, client=client, sent_at=now)
        )

    def _refuse_if_full(
        self,
        connection: Connection,
        now: datetime,
        limit: int,
        where: str,
        embed_name: str,
        client: str | None = None,
    ) -> None:
        query = select(col(EmbedSend.sent_at)).where(
            col(EmbedSend.embed_name) == embed_name,
            col(EmbedSend.sent_at) > self._sliding.start(now),
        )
        if client is not None:
            query = query.where(col(EmbedSend.client) == client)
        newest_first = connection.execute(
            query.order_by(col(EmbedSend.sent_at).desc()).limit(limit)
        ).scalars()
        # Room comes back when the oldest of the newest `limit` leaves the window.
        wait = self._sliding.wait(newest_first.all(), limit - 1, now)
        if wait is None:
            return
        seconds = self.window.total_seconds()
        raise TooManyRequests(
            f"{limit} messages were sent {where} in the last {seconds:g} seconds; "
            f"try again in {wait} seconds.",
            retry_after=wait,
        )
