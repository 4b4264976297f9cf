"""Follow an answer while it is written, from this worker's memory or from the database.

A page that streams an answer, or is reloaded mid-answer, wants snapshots of the
answer so far. When the answer runs in this process, its channel gives every
delta at once; when it runs in another worker (or another machine), the rows
it flushes are polled. Either way each snapshot is the whole text so far, so a
watcher that connects late or reconnects can neither duplicate nor lose text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from webapp.chat.models import Message, Role, Status
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
    throttle: float = 0.05,
) -> AsyncIterator[Snapshot]:
    answer = await chat.message(owner, conversation_id, answer_id)
    if answer.role != Role.ASSISTANT:
        raise NotFound("no such answer: that id is a user's message")
    user = await chat.user_row_of(answer)
    running = chat.running(answer_id)
    if answer.status != Status.STREAMING or running is None:
        async for snapshot in _poll(chat, owner, conversation_id, answer, user):
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


async def _poll(
    chat: ConversationService, owner: str, conversation_id: str, answer: Message, user: Message
) -> AsyncIterator[Snapshot]:
    seen: tuple[str, str, int | None] | None = None
    while True:
        final = answer.status != Status.STREAMING
        state = (answer.content, answer.status, user.dropped_turns)
        if state != seen or final:
            seen = state
            yield Snapshot(answer, user, final=final)
        if final:
            return
        await asyncio.sleep(chat.poll_interval)
        await chat.reap_stale(conversation_id)
        answer = await chat.message(owner, conversation_id, id_of(answer))
        user = await chat.message(owner, conversation_id, id_of(user))
