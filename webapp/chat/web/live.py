"""Follow an answer while it is written, from this worker's memory or from the database.

A page that streams an answer, or is reloaded mid-answer, wants snapshots of the
answer so far. When the answer runs in this process, its channel gives every
delta at once; when it runs in another worker (or another machine), the text its
writer announces is appended and the rows it flushes are read each time the process
hears that they moved (see `webapp.chat.answering.notify`: LISTEN/NOTIFY on PostgreSQL, one
shared poll on SQLite).
Either way each snapshot is the whole text so far, so a watcher that connects late
or reconnects can neither duplicate nor lose text.

Pages share one follower of each answer per worker (`webapp.chat.web.page_stream`), but each
still costs a connection and a write per update, so a worker lets only so many follow one
answer, and one owner, at once (`WATCHERS`); the one past a cap is refused (429) before
its stream opens.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing, contextmanager
from dataclasses import dataclass

from sqlmodel import Session, col, select

from webapp.chat.answering.notify import AnswerNotices, PollingNotices
from webapp.chat.answering.pieces import FollowedText
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import Message, Role, Status
from webapp.chat.web.tool_views import ToolPart, ToolParts, is_step, steps_of
from webapp.errors import NotFound
from webapp.limits import Places
from webapp.llm.providers.base import Prefill
from webapp.stored import id_of


@dataclass(frozen=True, slots=True)
class Snapshot:
    answer: Message
    user: Message
    final: bool
    prefill: Prefill | None = None
    """How far the engine has read the prompt, while no text has come (another worker's
    answers too on PostgreSQL, where its writer announces it; not on SQLite, whose
    workers hear each other by polling rows that do not hold it)."""
    tools: tuple[ToolPart, ...] = ()
    """The answer's tool calls so far (this worker's answers: from its events; others'
    show them once stored and read again)."""


class Watchers:
    """How many follow each answer, and each owner's answers, in this process."""

    def __init__(self) -> None:
        self._by_answer = Places()
        self._by_owner = Places()

    def of_answer(self, answer_id: int) -> int:
        return self._by_answer.held(answer_id)

    def of_owner(self, owner: str) -> int:
        return self._by_owner.held(owner)

    @contextmanager
    def hold(
        self, owner: str, answer_id: int, *, per_answer: int, per_owner: int
    ) -> Iterator[None]:
        """A place among the answer's and the owner's watchers for as long as this lasts,
        or TooManyRequests when either is full (a cap of 0: none)."""
        refused_answer = (
            f"this answer already has {per_answer} pages following it; close one, "
            "or try again once it is done"
        )
        refused_owner = f"you already have {per_owner} pages following answers; close some first"
        with (
            self._by_answer.hold(answer_id, per_answer, refused_answer),
            self._by_owner.hold(owner, per_owner, refused_owner),
        ):
            yield


WATCHERS = Watchers()
"""This process's watchers (each worker caps its own: they live in its memory)."""


async def answer_to_follow(
    chat: ChatJobs, owner: str, conversation_id: str, answer_id: int
) -> Message:
    """The answer's row, if `owner` may follow it (NotFound otherwise)."""
    answer = await chat.reader.message(owner, conversation_id, answer_id)
    if answer.role != Role.ASSISTANT:
        raise NotFound("no such answer: that id is a user's message")
    return answer


async def follow_answer(
    chat: ChatJobs,
    owner: str,
    conversation_id: str,
    answer_id: int,
    *,
    notices: AnswerNotices | None = None,
    per_answer: int = 0,
    per_owner: int = 0,
) -> AsyncGenerator[Snapshot, None]:
    """Snapshots of the answer until its final one; at most `per_answer` followers of
    one answer and `per_owner` of one owner's answers at once in this process (0: no
    cap). Close the iterator when done with it: that gives its place back."""
    answer = await answer_to_follow(chat, owner, conversation_id, answer_id)
    with WATCHERS.hold(owner, answer_id, per_answer=per_answer, per_owner=per_owner):
        following = snapshots_of(chat, owner, conversation_id, answer, notices)
        async with aclosing(following) as snapshots:
            async for snapshot in snapshots:
                yield snapshot


async def snapshots_of(
    chat: ChatJobs,
    owner: str,
    conversation_id: str,
    answer: Message,
    notices: AnswerNotices | None,
) -> AsyncGenerator[Snapshot, None]:
    """Every change of `answer` (each piece of its text) until its final snapshot, with
    no cap: what a caller that spaces them for many pages follows."""
    answer_id = id_of(answer)
    user = await chat.reader.user_row_of(answer)
    running = chat.answers.get(answer_id)
    if answer.status != Status.STREAMING or running is None:
        stored = _follow_stored(
            chat, notices or _unshared(chat), owner, conversation_id, answer, user
        )
        async with aclosing(stored) as snapshots:
            async for snapshot in snapshots:
                yield snapshot
        return
    text = running.prefix  # a continuation's earlier part: its deltas carry only the rest
    # A page loaded mid-answer already shows the text flushed so far: replaying the channel
    # from its start must not show less than that (the text would jump back, then regrow).
    floor = len(answer.content)
    # A batch at a time (what came since the last look): a burst of thousands of pieces
    # makes one snapshot, not one each, so it cannot hold the loop.
    prefill: Prefill | None = None
    tools = ToolParts()  # its calls, their approvals and results, as they happen
    async for batch in running.channel.batches():
        pieces = [event.data["text"] for event in batch if event.name == "delta"]
        read = [Prefill(**event.data) for event in batch if event.name == "progress"]
        called = [tools.add(event.name, event.data) for event in batch]
        if any(event.name == "fit" for event in batch):
            user = await chat.reader.message(owner, conversation_id, id_of(user))
        elif not pieces and not read and not any(called):
            continue
        text += "".join(pieces)
        prefill = None if text else (read[-1] if read else prefill)
        if len(text) >= floor:
            shown = answer.model_copy(update={"content": text})
            yield Snapshot(shown, user, final=False, prefill=prefill, tools=tools.parts)
    final = await chat.reader.message(owner, conversation_id, answer_id)
    user = await chat.reader.message(owner, conversation_id, id_of(user))
    yield Snapshot(final, user, final=True, tools=tools.parts or await stored_tools(chat, final))


STEPS_READ = 500
"""The most rows of one answer's tool steps a final snapshot reads (its calls are bounded
by `max_tool_steps` each a few calls: far fewer)."""


async def stored_tools(chat: ChatJobs, answer: Message) -> tuple[ToolPart, ...]:
    """The answer's tool calls as stored (the rows of its steps, stored after it): what a
    final snapshot shows when it did not see them happen."""

    def read(session: Session) -> list[Message]:
        rows = session.exec(
            select(Message)
            .where(Message.conversation_id == answer.conversation_id, Message.seq > answer.seq)
            .order_by(col(Message.seq))
            .limit(STEPS_READ)
        ).all()
        steps = []
        for row in rows:
            if not is_step(row):
                break
            steps.append(row)
        return steps

    return steps_of(await chat.db.read(read))


def _unshared(chat: ChatJobs) -> AnswerNotices:
    """For a caller that has no process-wide notices (a script, a test): its own poll."""
    # Nothing changes between two flushes of the writer, so looking more often is waste.
    return PollingNotices(chat.db, chat.settings.stream_flush_interval)


async def _follow_stored(
    chat: ChatJobs,
    notices: AnswerNotices,
    owner: str,
    conversation_id: str,
    answer: Message,
    user: Message,
) -> AsyncGenerator[Snapshot, None]:
    """Snapshots of an answer written elsewhere: its text grows by the pieces its writer
    announces (PostgreSQL), and the rows are read when they move (a flush, a new status,
    its end). A writer that died sends nothing more; now and then the watcher looks for
    itself, and reaps."""
    assert answer.id is not None and user.id is not None
    seen: tuple[int, str, int | None, Prefill | None] | None = None
    with notices.watch(id_of(answer)) as watch:
        if answer.status == Status.STREAMING:
            # Read again now the watch is on, so a notice sent in between is not missed.
            answer = await chat.reader.message(owner, conversation_id, id_of(answer))
        followed = FollowedText(answer.content)
        while True:
            final = answer.status != Status.STREAMING
            shown = answer if final else answer.model_copy(update={"content": followed.text})
            prefill = None if final or shown.content else watch.prefill
            state = (len(shown.content), answer.status, user.dropped_turns, prefill)
            if state != seen or final:
                seen = state
                tools = await stored_tools(chat, answer) if final else ()
                yield Snapshot(shown, user, final=final, prefill=prefill, tools=tools)
            if final:
                return
            # A writer that died sends no notice; its answer is reaped once it has been
            # quiet for `stale_stream_after`.
            heard = await watch.wait(chat.settings.stale_stream_after / 3)
            if not heard:
                await chat.reaper.reap_stale(conversation_id)
            pieces, moved = watch.take()
            for start, piece in pieces:
                followed.add(start, piece)
            if moved or not heard:
                answer = await chat.reader.message(owner, conversation_id, id_of(answer))
                user = await chat.reader.message(owner, conversation_id, id_of(user))
                followed.add(0, answer.content)  # a prefix of the text: fills what was missed
