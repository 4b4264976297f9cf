"""Whether a call may reach a model: the one admission every sending route goes through.

A send (a page's or the API's message, an edit, a regenerate or retry, a Continue, an
embed visitor's, a gateway call with `x-conversation-id`) is admitted by
`Admission.admit`, the first statement of its transaction: it takes the conversation's
lock (a row lock on PostgreSQL, the write lock on SQLite) by touching the conversation,
counts the owner's recent sends and gateway calls in the same statement, refuses a send
past the rate limit or into a conversation whose answer is still being written, asks
the caller quotas (`CallerQuota`: the embed's per address and per embed) and records the
send it lets through. Everything after it in the transaction reads rows no other send
can change before this one is stored. A gateway call that stores no message is admitted
by `Admission.admit_call`, in a transaction of its own, by the same counts. A refused
call counts nowhere: its transaction rolls back.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NoReturn, Protocol, TypeVar, TypeVarTuple

from sqlalchemy import Connection, bindparam, update
from sqlmodel import col, select

from webapp.chat.answering.reaping import reap
from webapp.chat.stored.budget import (
    MESSAGE_USES,
    RECENT_COUNT,
    Use,
    hold_budget,
    message_budget_wait,
    prune_uses,
    record_use,
)
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.db import CoreWork, Database, as_loaded
from webapp.errors import Conflict, InvalidInput, NotFound, TooManyRequests, refuse_nul
from webapp.limits import OWNERS_KEPT
from webapp.owners import EMBED_OWNER_PREFIX
from webapp.prepared import Prepared
from webapp.settings import Settings
from webapp.timeutil import as_utc, utcnow

_NEWEST_STATUS = (
    select(col(Message.status))
    .where(
        col(Message.conversation_id) == bindparam("conversation_id"),
        # A turn's tool steps are stored after its answer's row: they are not its status.
        col(Message.role) != Role.TOOL.value,
        col(Message.tool_calls).is_(None),
    )
    .order_by(col(Message.seq).desc())
    .limit(1)
    .scalar_subquery()
)
_TOUCH_CONVERSATION = Prepared(
    update(Conversation)
    .where(
        col(Conversation.id) == bindparam("conversation_id"),
        col(Conversation.owner) == bindparam("owned_by"),
    )
    .values(updated_at=bindparam("now"))
    .returning(Conversation, _NEWEST_STATUS, RECENT_COUNT)
)
"""Takes the conversation's lock, counts the owner's recent sends and gateway calls
(`gateway_call` rows, which deleting conversations keeps) and reads the status of the
conversation's newest row (a send's answer is always the newest row), in one round trip."""


class CallerQuota(Protocol):
    """A limit on top of the owner's rate limit, counted in the admission's transaction
    (the embed's, per client address and per embed: `webapp.embed.quota`)."""

    def take(self, connection: Connection, owner: str, address: str, now: datetime) -> None:
        """Count one model call by `owner` from `address`, or refuse it (TooManyRequests);
        owners the quota is not about pass untouched."""


Args = TypeVarTuple("Args")
Stored = TypeVar("Stored")


class Admission:
    """The rules a call to a model is admitted by: the owner's rate limit, the caller
    quotas, and one answer at a time per conversation."""

    def __init__(self, settings: Settings, quotas: Sequence[CallerQuota] = ()) -> None:
        self._settings = settings
        self._quotas = tuple(quotas)
        self._refused_until: OrderedDict[str, float] = OrderedDict()

    def refused_lately(self, owner: str) -> bool:
        """Whether this process refused the owner a send whose wait is not over: only a
        hint (`admit` decides), so that a send sure to be refused does not first ask the
        engine to count its message."""
        until = self._refused_until.get(owner)
        return until is not None and time.monotonic() < until

    async def run(
        self, db: Database, owner: str, work: CoreWork[*Args, Stored], *args: *Args, key: str
    ) -> Stored:
        """`work`, a send's one transaction, which admits it (`admit`); a refusal is
        remembered, so the owner's next try is not counted before it is refused again."""
        try:
            return await db.write_core(work, *args, key=key)
        except TooManyRequests as refused:
            self.remember_refusal(owner, refused)
            raise

    def remember_refusal(self, owner: str, refused: TooManyRequests) -> None:
        self._refused_until[owner] = time.monotonic() + refused.retry_after
        self._refused_until.move_to_end(owner)
        if len(self._refused_until) > OWNERS_KEPT:
            self._refused_until.popitem(last=False)

    def rate_limit_for(self, owner: str) -> int:
        if owner.startswith(EMBED_OWNER_PREFIX):
            return self._settings.embed_rate_limit_messages
        return self._settings.rate_limit_messages

    def counts(self, owner: str) -> bool:
        """Whether admitting the owner's calls counts anything (a limit is on)."""
        return self.rate_limit_for(owner) > 0 or bool(self._quotas)

    @property
    def window(self) -> float:
        return self._settings.rate_limit_window

    def admit(
        self,
        connection: Connection,
        owner: str,
        conversation_id: str,
        now: datetime,
        address: str = "",
    ) -> Conversation:
        """The owner's conversation, locked, once the send (from the client `address`) is
        let through and counted; the first statement of the send's transaction."""
        limit = self.rate_limit_for(owner)
        if limit > 0:
            hold_budget(connection, owner)
        touched = _TOUCH_CONVERSATION.first(
            connection,
            {
                "conversation_id": conversation_id,
                "owned_by": owner,
                "now": now,
                "since": now - timedelta(seconds=self.window),
                "limit": max(limit, 0),
            },
        )
        if touched is None:
            raise NotFound("no such conversation")
        *columns, newest_status, recent_sends = touched
        conversation = as_loaded(
            Conversation, dict(zip(_TOUCH_CONVERSATION.names, columns, strict=False))
        )
        if limit > 0 and recent_sends >= limit:
            self.refuse_too_many(connection, owner, limit, now)
        self._count(connection, owner, address, now, Use.SEND if limit > 0 else None)
        if newest_status == Status.STREAMING.value:
            self._refuse_if_busy(connection, conversation_id)
        return conversation

    def admit_call(
        self, connection: Connection, owner: str, now: datetime, address: str = "", *, record: bool
    ) -> None:
        """A gateway call, admitted by the same counts as a send, or refused
        (TooManyRequests). A call that will store a message (`record=False`) is only
        checked: its send counts, in its own transaction."""
        limit = self.rate_limit_for(owner)
        if limit > 0:
            hold_budget(connection, owner)
            if message_budget_wait(connection, owner, limit, self.window, now) is not None:
                self.refuse_too_many(connection, owner, limit, now)
        if record:
            self._count(connection, owner, address, now, Use.CALL if limit > 0 else None)

    def admit_upload(self, connection: Connection, owner: str, now: datetime, address: str) -> None:
        """An embed visitor's upload, counted by the caller quotas as a send is (per
        address and per embed), so changing cookies does not make room for more files."""
        for quota in self._quotas:
            quota.take(connection, owner, address, now)

    def _count(
        self, connection: Connection, owner: str, address: str, now: datetime, use: Use | None
    ) -> None:
        """Past the owner's own limit: the caller quotas, then the owner's use recorded."""
        for quota in self._quotas:
            quota.take(connection, owner, address, now)
        if use is not None:
            record_use(connection, owner, use, now)
            prune_uses(connection, (*MESSAGE_USES, Use.SUMMARY), self.window, now)

    def refuse_too_many(
        self, connection: Connection, owner: str, limit: int, now: datetime
    ) -> NoReturn:
        """The owner has sent `limit` messages (or gateway calls) within the window: say
        when enough of them leave it."""
        window = self.window
        wait = message_budget_wait(connection, owner, limit, window, now) or 1
        raise TooManyRequests(
            f"You have sent {limit} messages in the last {window:g} seconds; "
            f"try again in {wait} seconds.",
            retry_after=wait,
        )

    def _refuse_if_busy(self, connection: Connection, conversation_id: str) -> None:
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


def checked_text(content: object, limit: int, *, may_be_empty: bool = False) -> str:
    """The message a send (or a preview) was given, once it is one: a string with
    something in it (or nothing, when files go with it), no NUL, at most `limit`
    characters."""
    if not isinstance(content, str):
        raise InvalidInput("content must be a string")
    if not content.strip() and not may_be_empty:
        raise InvalidInput("the message is empty: type something or attach a file")
    refuse_nul(content, "the message")
    if len(content) > limit:
        raise InvalidInput(f"the message is {len(content):,} characters; the limit is {limit:,}")
    return content
