"""The summary job: at a send that moved the cut, fold what it left out into a new version
of the branch's summary (the rule and the texts are `webapp.llm.summaries`').

The call replays the request the engine has just cached (the previous send's request and
its answer) plus one instruction, on the conversation's cache key, so the engine serves it
from its cache. A move never waits long for it: the send waits at most
`summary_wait_seconds`; past that (or if the call fails) the send goes with the summary it
was planned with, and the new version, stored whenever it arrives, is carried from the
next move on. Each call leaves a `gateway_call` row of kind "summary".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from webapp.chat.stored.budget import Use, record_use
from webapp.chat.stored.history import Branch
from webapp.chat.stored.models import REPLAYABLE, Message, Summary
from webapp.chat.stored.rows import set_columns
from webapp.chat.stored.summaries import add_version, on_branch
from webapp.db import Database
from webapp.llm.catalog import ModelSpec
from webapp.llm.estimator import estimate_message, estimate_text, estimate_tools
from webapp.llm.manager import LLMManager, Plan, cache_marks
from webapp.llm.providers.base import CallInfo, ChatResult
from webapp.llm.summaries import (
    Folding,
    fallback_request,
    folding,
    instruction,
    replay,
    squeezed,
    summary_tokens,
    with_new_summary,
)
from webapp.llm.window import SAFETY_FRACTION
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import utcnow

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3
"""A low guess of characters per token, for cutting quoted turns to a token room."""
GAP_CHARS = 40_000
"""At most this much text of folded turns the replayed request does not hold (after a
summary that failed) is quoted in the instruction."""


class Summarizer:
    """The process's summary calls: started by the answer that moved the cut, waited for
    briefly, kept running past that wait (a late version is stored for the next move), and
    cancelled at shutdown."""

    def __init__(self, db: Database, manager: LLMManager, settings: Settings) -> None:
        self._db, self._manager, self._settings = db, manager, settings
        self._running: set[asyncio.Task[Summary | None]] = set()

    async def at_send(self, user: Message, planned: Plan) -> Plan:
        """The plan to send: with a new summary in its slot when this send moved the cut
        and the summary was written in time (its version then stored on the user row),
        else as planned."""
        transcript, fit = planned.transcript, planned.fit
        positions = transcript.positions
        left_out = positions.left_out(fit) if positions is not None else []
        fold = folding(transcript, fit, left_out)
        if fold is None:
            return planned
        task = asyncio.create_task(self._write(planned, fold, user.conversation_id), name="summary")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        done, _ = await asyncio.wait({task}, timeout=self._settings.summary_wait_seconds)
        written = task.result() if done else None
        if written is None:
            return planned
        transcript, fit = with_new_summary(
            transcript,
            fit,
            written.content,
            written.version,
            id_of(written),
            (written.first_seq, written.last_seq),
        )
        await self._db.write(_set_version, id_of(user), written.version)
        return dataclasses.replace(planned, transcript=transcript, fit=fit)

    async def shutdown(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _write(self, planned: Plan, fold: Folding, conversation_id: str) -> Summary | None:
        """Make the call and store the new version (None: it failed, and is logged)."""
        try:
            return await self._call(planned, fold, conversation_id)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # any failure: the send goes with the summary before
            log.warning("the summary call failed: %s", error)
            return None

    async def _call(self, planned: Plan, fold: Folding, conversation_id: str) -> Summary | None:
        transcript, fit, route = planned.transcript, planned.fit, planned.route
        positions, slot = transcript.positions, transcript.summary
        assert positions is not None and slot is not None, "a fold has a slot and positions"
        branch = Branch(positions.runs)
        catalog = self._manager.catalog
        model = catalog.models[route.configuration.summary_model or fit.model]
        tokens = summary_tokens(route.configuration.summary_max_tokens, fit.budget)
        replayed = replay(transcript)
        first_kept = next(
            (s for i, s in enumerate(positions.seqs) if i >= transcript.keep_from and s),
            None,
        )
        base, gap = await self._db.read(
            _base_and_gap, conversation_id, branch, slot.version, fold, first_kept
        )
        # The call must fit the window: the summary's room shrinks (to a quarter at least;
        # to half of what is free when turns must be quoted), and quoted turns are cut to
        # the rest.
        factor = self._manager.calibrator.factor(model.name, planned.caller)
        window = self._manager.serving(model).window
        bare = [*replayed, instruction(fold, tokens=tokens, base=base)]
        # The tools the previous request offered go again: engines render them at the very
        # start of the prompt, so without them nothing of the cached request would match.
        tools = planned.tools
        used = math.ceil((sum(estimate_message(m) for m in bare) + estimate_tools(tools)) * factor)
        free = window - used - math.ceil(window * SAFETY_FRACTION)
        least = summary_tokens(route.configuration.summary_max_tokens, fit.budget) // 4
        tokens = min(tokens, free if not gap else max(least, free // 2))
        if tokens < least:
            # The replay leaves too little room: an uncached call of its own instead.
            return await self._fallback(planned, fold, conversation_id, model, window, factor)
        if gap:
            room = (free - tokens) * CHARS_PER_TOKEN
            gap = squeezed(gap, room)
        asked = [*replayed, instruction(fold, tokens=tokens, base=base, gap=gap)]
        info = CallInfo(
            model=model.name,
            window=model.window,
            budget=fit.budget,
            estimated_tokens=fit.estimated_tokens,
            dropped_turns=0,
            reserve=tokens,
            cache_marks=cache_marks(replayed),
            cache_key=planned.cache_key,
        )
        answer = await self._manager.provider_for(model).chat(
            model.model_id, asked, max_tokens=tokens, tools=tools, info=info
        )
        if answer.tool_calls and not answer.content.strip():
            # Offered the tools (for the cache's sake), the model called one instead of
            # summarizing: a call of its own, without them.
            log.info("the summary call was answered with a tool call: an uncached call")
            return await self._fallback(planned, fold, conversation_id, model, window, factor)
        return await self._store(planned, fold, conversation_id, model.name, answer)

    async def _fallback(
        self,
        planned: Plan,
        fold: Folding,
        conversation_id: str,
        model: ModelSpec,
        window: int,
        factor: float,
    ) -> Summary | None:
        """The summary call when the replayed request cannot fit: the previous summary and
        the turns the move left out, cut to fit, in a request of its own. It carries no
        cache key: it would only push the conversation's prompt out of its slot."""
        transcript, fit, route = planned.transcript, planned.fit, planned.route
        positions = transcript.positions
        assert positions is not None, "a fold has positions"
        branch = Branch(positions.runs)
        previous, turns = await self._db.read(_left_out, conversation_id, branch, fold)
        tokens = summary_tokens(route.configuration.summary_max_tokens, fit.budget)
        bare = fallback_request(fold, tokens=tokens, previous=previous, turns=())
        used = math.ceil(sum(estimate_message(m) for m in bare) * factor)
        free = window - used - math.ceil(window * SAFETY_FRACTION) - tokens
        if free <= 0:
            log.warning("the summary call does not fit the window of %s", model.name)
            return None
        chars = math.floor(free / factor) * CHARS_PER_TOKEN
        while True:
            asked = fallback_request(
                fold, tokens=tokens, previous=previous, turns=squeezed(turns, chars)
            )
            size = math.ceil(sum(estimate_message(m) for m in asked) * factor)
            if size + tokens + math.ceil(window * SAFETY_FRACTION) <= window:
                break
            if chars < 200:
                log.warning("the summary call does not fit the window of %s", model.name)
                return None
            chars //= 2  # the guess of characters per token was high for this text
        info = CallInfo(
            model=model.name,
            window=model.window,
            budget=fit.budget,
            estimated_tokens=size,
            dropped_turns=0,
            reserve=tokens,
        )
        log.info("the summary call replays too much for %s: an uncached call", model.name)
        answer = await self._manager.provider_for(model).chat(
            model.model_id, asked, max_tokens=tokens, info=info
        )
        return await self._store(planned, fold, conversation_id, model.name, answer, fallback=True)

    async def _store(
        self,
        planned: Plan,
        fold: Folding,
        conversation_id: str,
        model_name: str,
        answer: ChatResult,
        *,
        fallback: bool = False,
    ) -> Summary | None:
        """Store the call's answer as the branch's new version (None: it answered nothing)."""
        positions = planned.transcript.positions
        assert positions is not None, "a fold has positions"
        branch = Branch(positions.runs)
        content = answer.content.strip()
        if not content:
            log.warning("the summary call answered nothing")
            return None
        usage = answer.usage
        values: dict[str, Any] = {
            "first_seq": fold.covers[0],
            "last_seq": fold.covers[1],
            "content": content,
            "model": model_name,
            "tokens": usage.completion_tokens if usage else estimate_text(content),
            "prompt_tokens": usage.prompt_tokens if usage else None,
            "cached_tokens": usage.cached_tokens if usage else None,
            "evaluated_tokens": usage.evaluated if usage else None,
            "created_at": utcnow(),
            "fallback": fallback,
        }
        stored: Summary = await self._db.write(
            _store, planned.caller, conversation_id, branch, values
        )
        return stored


def _set_version(session: Session, user_id: int, version: int) -> None:
    set_columns(session.connection(), user_id, {"fit_summary": version})


def _store(
    session: Session, owner: str, conversation_id: str, branch: Branch, values: dict[str, Any]
) -> Summary:
    connection = session.connection()
    row = add_version(connection, conversation_id, branch, values)
    record_use(connection, owner, Use.SUMMARY, values["created_at"], values["prompt_tokens"] or 0)
    return row


def _base_and_gap(
    session: Session,
    conversation_id: str,
    branch: Branch,
    carried: int | None,
    fold: Folding,
    first_kept: int | None,
) -> tuple[str | None, list[tuple[int, str, str]]]:
    """The text of a newer summary than the one the replayed request carries (None: it
    carries the newest), and the folded turns that request does not hold."""
    connection = session.connection()
    known = on_branch(connection, conversation_id, branch)
    newest = known[-1] if known else None
    base = newest.content if newest is not None and newest.version != carried else None
    since = (newest.last_seq if newest is not None else fold.covers[0] - 1) + 1
    until = min(first_kept or since, fold.covers[1] + 1)
    if until <= since:
        return base, []
    rows = connection.execute(
        select(
            col(Message.seq),
            col(Message.role),
            col(Message.content),
            col(Message.status),
            col(Message.prior_turns),
        )
        .where(
            col(Message.conversation_id) == conversation_id,
            col(Message.seq) >= since,
            col(Message.seq) < until,
            col(Message.pinned).is_(False),
        )
        .order_by(col(Message.seq))
    ).all()
    by_seq = {row.seq: row for row in rows if row.seq in branch}
    gap: list[tuple[int, str, str]] = []
    size = 0
    replayable = {status.value for status in REPLAYABLE}
    for seq, row in by_seq.items():
        answer = by_seq.get(seq + 1)
        if row.role != "user" or answer is None or answer.status not in replayable:
            continue
        size += len(row.content) + len(answer.content)
        if size > GAP_CHARS:
            break
        gap.append(((row.prior_turns or 0) + 1, row.content, answer.content))
    return base, gap


def _left_out(
    session: Session, conversation_id: str, branch: Branch, fold: Folding
) -> tuple[str | None, list[tuple[int, str, str]]]:
    """For the fallback call: the newest summary's text on the branch (None: none yet) and
    the turns from its end through what the move left out, each (turn number, question,
    answer), the answer with its tool steps' results named and quoted; pins left alone."""
    connection = session.connection()
    known = on_branch(connection, conversation_id, branch)
    newest = known[-1] if known else None
    since = max(newest.last_seq + 1 if newest is not None else 0, fold.covers[0])
    rows = connection.execute(
        select(
            col(Message.seq),
            col(Message.role),
            col(Message.content),
            col(Message.pinned),
            col(Message.prior_turns),
            col(Message.tool_name),
        )
        .where(
            col(Message.conversation_id) == conversation_id,
            col(Message.seq) >= since,
            col(Message.seq) <= fold.covers[1],
        )
        .order_by(col(Message.seq))
    ).all()
    turns: list[tuple[int, str, list[str]]] = []
    skipping = False
    size = 0
    for row in rows:
        if row.seq not in branch:
            continue
        if row.role == "user":
            skipping = bool(row.pinned)
            if not skipping:
                turns.append(((row.prior_turns or 0) + 1, row.content, []))
        elif turns and not skipping and row.content:
            text = row.content
            if row.role == "tool":
                text = f"(result of tool {row.tool_name}: {text})"
            turns[-1][2].append(text)
        size += len(row.content or "")
        if size > GAP_CHARS * 4:
            break
    return (newest.content if newest is not None else None), [
        (number, question, "\n".join(answer)) for number, question, answer in turns
    ]
