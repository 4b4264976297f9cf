"""Follow an answer while it is written, from this worker's memory or from the database.

A page that streams an answer, or is reloaded mid-answer, wants snapshots of the
answer so far. When the answer runs in this process, its channel gives every
delta at once; when it runs in another worker (or another machine), the rows
it flushes are read each time the process hears that they moved (see
`webapp.chat.notify`: LISTEN/NOTIFY on PostgreSQL, one shared poll on SQLite).
Either way each snapshot is the whole text so far, so a watcher that connects late
or reconnects can neither duplicate nor lose text.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from webapp.chat.models import Message, Role, Status
from webapp.chat.notify import AnswerNotices, PollingNotices
from webapp.chat.service import ConversationService
from webapp.errors import NotFound
from webapp.stored import id_of


@dataclass(frozen=True, slots=True)
class Snapshot:
    answer: Message
    user: Message
    final: bool


async def follow_answer(
    chat: ConversationService,
    owner: str,
    conversation_id: str,
    answer_id: int,
    *,
    notices: AnswerNotices | None = None,
    throttle: float = 0.05,
) -> AsyncIterator[Snapshot]:
    answer = await chat.message(owner, conversation_id, answer_id)
    if answer.role != Role.ASSISTANT:
        raise NotFound("no such answer: that id is a user's message")
    user = await chat.user_row_of(answer)
    running = chat.running(answer_id)
    if answer.status != Status.STREAMING or running is None:
        stored = _follow_stored(
            chat, notices or _unshared(chat), owner, conversation_id, answer, user
        )
        async for snapshot in stored:
            yield snapshot
        return
    text = ""
    shown = -1.0
    # A page loaded mid-answer already shows the text flushed so far: replaying the channel
    # from its start must not show less than that (the text would jump back, then regrow).
    floor = len(answer.content)
    async for event in running.channel.follow():
        if event.name == "fit":
            user = await chat.message(owner, conversation_id, id_of(user))
            if len(text) >= floor:
                yield Snapshot(answer.model_copy(update={"content": text}), user, final=False)
        elif event.name == "delta":
            text += event.data["text"]
            if len(text) >= floor and time.monotonic() - shown >= throttle:
                shown = time.monotonic()
                yield Snapshot(answer.model_copy(update={"content": text}), user, final=False)
    final = await chat.message(owner, conversation_id, answer_id)
    user = await chat.message(owner, conversation_id, id_of(user))
    yield Snapshot(final, user, final=True)


def _unshared(chat: ConversationService) -> AnswerNotices:
    """For a caller that has no process-wide notices (a script, a test): its own poll."""
    return PollingNotices(chat.db, chat.poll_interval)


async def _follow_stored(
    chat: ConversationService,
    notices: AnswerNotices,
    owner: str,
    conversation_id: str,
    answer: Message,
    user: Message,
) -> AsyncIterator[Snapshot]:
    """Snapshots of an answer written elsewhere: read when it moves. A writer that died
    sends nothing more; now and then the watcher looks for itself, and reaps."""
    assert answer.id is not None and user.id is not None
    seen: tuple[str, str, int | None] | None = None
    with notices.watch(id_of(answer)) as watch:
        if answer.status == Status.STREAMING:
            # Read again now the watch is on, so a notice sent in between is not missed.
            answer = await chat.message(owner, conversation_id, id_of(answer))
        while True:
            final = answer.status != Status.STREAMING
            state = (answer.content, answer.status, user.dropped_turns)
            if state != seen or final:
                seen = state
                yield Snapshot(answer, user, final=final)
            if final:
                return
            if not await watch.wait(chat.recheck_interval):
                await chat.reap_stale(conversation_id)
            answer = await chat.message(owner, conversation_id, id_of(answer))
            user = await chat.message(owner, conversation_id, id_of(user))
