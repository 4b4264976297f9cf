"""Rate limits for anonymous embed visitors that changing cookies does not reset.

The per-visitor limit (in the conversation service) counts a visitor's own messages,
but a visitor is whatever id the browser brings, and a browser without cookies gets a
new one with every page. So every send through an embed is also counted per client
address (as seen through the trusted proxies) and, as a ceiling on what all visitors
of one embed may cost together, per embed. The counts live in the database, so every
worker sees the same.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlmodel import Session, col, select

from webapp.db import Database
from webapp.embed.models import CLIENT_MAX_LENGTH, EmbedSend
from webapp.errors import TooManyRequests
from webapp.limits import SlidingWindow, advisory_lock
from webapp.timeutil import utcnow


class EmbedQuota:
    def __init__(
        self,
        db: Database,
        *,
        per_client: int,
        per_embed: int,
        window: timedelta,
    ) -> None:
        self.db = db
        self.per_client = per_client
        self.per_embed = per_embed
        self.window = window
        self._sliding = SlidingWindow(window)

    async def take(self, embed_name: str, client: str) -> None:
        """Count one send through `embed_name` from `client`, or refuse it (TooManyRequests)
        when the client's or the embed's limit is already reached; a refused send is not
        counted. The first statement writes, so on SQLite the transaction holds the write
        lock while it counts; PostgreSQL takes a lock per embed: parallel sends cannot
        both see room for one."""
        if self.per_client <= 0 and self.per_embed <= 0:
            return
        client = client[:CLIENT_MAX_LENGTH]
        now = utcnow()
        since = self._sliding.start(now)

        def count(session: Session) -> None:
            connection = session.connection()
            advisory_lock(connection, f"embed-send {embed_name}")
            connection.execute(delete(EmbedSend).where(col(EmbedSend.sent_at) <= since))
            if self.per_client > 0:
                self._refuse_if_full(
                    session, now, self.per_client, "from your address", embed_name, client
                )
            if self.per_embed > 0:
                self._refuse_if_full(session, now, self.per_embed, "through this chat", embed_name)
            session.add(EmbedSend(embed_name=embed_name, client=client, sent_at=now))

        await self.db.write(count)

    def _refuse_if_full(
        self,
        session: Session,
        now: datetime,
        limit: int,
        where: str,
        embed_name: str,
        client: str | None = None,
    ) -> None:
        query = select(EmbedSend.sent_at).where(
            col(EmbedSend.embed_name) == embed_name,
            col(EmbedSend.sent_at) > self._sliding.start(now),
        )
        if client is not None:
            query = query.where(col(EmbedSend.client) == client)
        newest_first = session.exec(query.order_by(col(EmbedSend.sent_at).desc()).limit(limit))
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
