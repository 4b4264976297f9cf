"""Load what a send may replay, reading only as much history as could possibly be sent.

A conversation of ten thousand turns must not be read whole to send one more:
the head (opening exchange) is one query, the newest turns are read newest
first in small batches until even the largest budget of the route is spent, and
the turns in between are only counted. The cost follows what is kept, not what
is stored. Per-message estimates were stored when each row was written, so
nothing here re-estimates old text.

A turn is replayed only if its answer is worth replaying: complete, stopped or
interrupted with some text. A failed answer stays in the record but is not sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, func, select
from sqlalchemy.orm import aliased
from sqlmodel.ext.asyncio.session import AsyncSession

from webapp.chat.models import REPLAYABLE, Message, Role
from webapp.llm.manager import Transcript
from webapp.llm.providers.base import Message as WireMessage

BATCH = 64

_user = aliased(Message, name="u")
_answer = aliased(Message, name="a")


@dataclass(frozen=True, slots=True)
class StoredTurn:
    seq: int
    """The user row's sequence number; its answer is seq + 1."""
    user: str
    answer: str
    tokens: int
    user_tokens: int

    def wire(self) -> list[WireMessage]:
        return [
            {"role": "user", "content": self.user},
            {"role": "assistant", "content": self.answer},
        ]


def _replayable_turns(conversation_id: str, before_seq: int):  # type: ignore[no-untyped-def]
    return (
        select(
            _user.seq,
            _user.content,
            _answer.content,
            _user.estimated_tokens,
            _answer.estimated_tokens,
        )
        .join(
            _answer,
            and_(
                _answer.conversation_id == _user.conversation_id,
                _answer.seq == _user.seq + 1,
            ),
        )
        .where(
            _user.conversation_id == conversation_id,
            _user.role == Role.USER,
            _user.seq < before_seq,
            _answer.role == Role.ASSISTANT,
            _answer.status.in_([s.value for s in REPLAYABLE]),
            _answer.content != "",
        )
    )


def _turn(row) -> StoredTurn:  # type: ignore[no-untyped-def]
    seq, user, answer, user_tokens, answer_tokens = row
    return StoredTurn(seq, user, answer, user_tokens + answer_tokens, user_tokens)


async def head_turn(
    session: AsyncSession, conversation_id: str, before_seq: int
) -> StoredTurn | None:
    query = _replayable_turns(conversation_id, before_seq).order_by(_user.seq).limit(1)
    row = (await session.exec(query)).first()
    return _turn(row) if row else None


async def newest_turns(
    session: AsyncSession, conversation_id: str, before_seq: int, after_seq: int, budget: int
) -> list[StoredTurn]:
    """Turns after `after_seq`, newest first, until their raw estimates exceed `budget`."""
    turns: list[StoredTurn] = []
    spent = 0
    upper = before_seq
    while True:
        query = (
            _replayable_turns(conversation_id, upper)
            .where(_user.seq > after_seq)
            .order_by(_user.seq.desc())
            .limit(BATCH)
        )
        rows = (await session.exec(query)).all()
        for row in rows:
            turn = _turn(row)
            spent += turn.tokens
            if spent > budget:
                return turns
            turns.append(turn)
        if len(rows) < BATCH:
            return turns
        upper = turns[-1].seq


async def count_turns_between(
    session: AsyncSession, conversation_id: str, after_seq: int, before_seq: int
) -> int:
    inner = _replayable_turns(conversation_id, before_seq).where(_user.seq > after_seq).subquery()
    return (await session.exec(select(func.count()).select_from(inner))).one()[0]


async def load_transcript(
    session: AsyncSession,
    conversation_id: str,
    newest: WireMessage,
    newest_tokens: int,
    newest_seq: int,
    *,
    budget: int,
    system_prompt: WireMessage | None = None,
    system_tokens: int = 0,
) -> Transcript:
    """The transcript for sending `newest` (stored at `newest_seq`), with only the history
    that `budget` (the largest budget of the route, in raw tokens) could hold."""
    messages: list[WireMessage] = []
    estimates: list[int] = []
    if system_prompt is not None:
        messages.append(system_prompt)
        estimates.append(system_tokens)
    head = await head_turn(session, conversation_id, newest_seq)
    omitted = 0
    if head is not None:
        for message, tokens in zip(
            head.wire(), (head.user_tokens, head.tokens - head.user_tokens), strict=True
        ):
            messages.append(message)
            estimates.append(tokens)
        tail = await newest_turns(session, conversation_id, newest_seq, head.seq, budget)
        oldest_loaded = tail[-1].seq if tail else newest_seq
        omitted = await count_turns_between(session, conversation_id, head.seq, oldest_loaded)
        for turn in reversed(tail):
            messages.extend(turn.wire())
            estimates.extend((turn.user_tokens, turn.tokens - turn.user_tokens))
    messages.append(newest)
    estimates.append(newest_tokens)
    return Transcript(messages=messages, estimates=estimates, omitted_turns=omitted)


async def replayable_user_seqs(
    session: AsyncSession, conversation_id: str, before_seq: int, limit: int
) -> list[int]:
    """The oldest `limit` replayable turns before `before_seq`, by their user row's seq."""
    query = (
        _replayable_turns(conversation_id, before_seq).order_by(_user.seq).limit(limit)
    ).with_only_columns(_user.seq)
    return list((await session.exec(query)).scalars())


def left_out(replayable: list[int], dropped_turns: int) -> list[int]:
    """Which turns a send left out, rebuilt from its stored count and the bound's rule:
    the head (first replayable turn) is kept and the `dropped_turns` oldest turns after
    it were not sent. `replayable` are the replayable turns before that send, in order."""
    return replayable[1 : 1 + dropped_turns]
