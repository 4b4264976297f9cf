"""A summary of what the cut left out, that keeps the engine's prompt cache.

The summary changes only when the cut moves. Between two moves every request is the
previous one, its answer and the new turn, byte for byte, summary included, so the
engine's prompt cache serves all but the new turn. At a move, the turns it leaves out
are folded into a new version of the summary by a call that replays the request the
engine has just cached (the previous request and its answer) plus one instruction:
that call is served from the cache and evaluates little more than the instruction.

Where it goes: right after the head (system prompt and opening exchange), never in the
system prompt (a rewrite there would change the very start of every request), as a
user message and an acknowledgement, so templates that want strictly alternating roles
take it. Its room (`summary_max_tokens`) is kept on every send whether the slot holds a
summary yet or not, so swapping a new one in never outgrows a fit. Pinned turns are
sent as themselves and never folded. What this module does is pure: the job that makes
the call and stores the versions is `webapp.chat.answering.summarizing`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from webapp.llm import clearing
from webapp.llm.estimator import estimate_message
from webapp.llm.providers.base import Message
from webapp.llm.window import FitResult, Span, SummarySlot, Transcript, split_turns

SUMMARY_SHARE = 0.10
"""The summary's default room: this share of the budget."""

HEADING = "Summary of the earlier part of this conversation, which is no longer shown in full:"
ACKNOWLEDGEMENT = "Understood. I will rely on this summary for that part of the conversation."
EMPTY: tuple[Message, Message] = (
    {"role": "user", "content": ""},
    {"role": "assistant", "content": ""},
)
"""An empty slot: it keeps its room and is never sent."""


def summary_tokens(configured: int | None, budget: int) -> int:
    """The most tokens a summary may take: the configuration's, else `SUMMARY_SHARE` of
    the budget."""
    return configured if configured is not None else max(1, math.ceil(budget * SUMMARY_SHARE))


def room_for(tokens: int) -> int:
    """A slot's room in raw-estimate tokens: the summary and its wrapping."""
    wrapped = slot_messages("")
    return (
        tokens
        + estimate_message({"role": "user", "content": HEADING})
        + estimate_message(wrapped[1] | {"content": ACKNOWLEDGEMENT})
    )


def slot_messages(content: str) -> tuple[Message, Message]:
    """The slot's two messages for a summary's text ("" for an empty slot)."""
    if not content:
        return EMPTY
    return (
        {"role": "user", "content": f"{HEADING}\n\n{content}"},
        {"role": "assistant", "content": ACKNOWLEDGEMENT},
    )


def replay(transcript: Transcript) -> list[Message]:
    """The request the previous send of the branch made, and its answer: what the engine
    has just cached. While the cut held, that is this transcript less its newest turn, cut
    where the previous send cut it: the preamble, the head, a summary slot that holds one,
    pinned turns and every turn from `keep_from` on, with the tool results it cleared
    (before `cleared_through`) as their stubs."""
    messages = transcript.messages
    preamble, turns = split_turns(messages)
    pinned = set(transcript.pinned)
    slot = transcript.summary
    kept = list(preamble)
    for t, turn in enumerate(turns[:-1]):
        first = turn[0]
        is_slot = slot is not None and first == slot.index
        if is_slot and messages[first].get("content") == "":
            continue
        if t == 0 or is_slot or first in pinned or first >= transcript.keep_from:
            kept += turn
    # Tool results the previous send carried as stubs are replayed as those stubs.
    through = transcript.cleared_through if transcript.clear_keep is not None else 0
    sizes = transcript.sizes() if through else ()
    return [
        clearing.stub(messages[i], sizes[i])
        if i < through and messages[i].get("role") == "tool"
        else messages[i]
        for i in kept
    ]


@dataclass(frozen=True, slots=True)
class Folding:
    """What a move folds into the summary: the new version covers `covers`; the replayed
    request holds the turns from `first_seq` on; `gap` are turns the replayed request does
    not hold (a summary that was late or failed before), quoted in the instruction."""

    covers: Span
    first_turn: int
    last_turn: int
    first_kept: str | None
    """The opening of the first message the new summary does not cover."""


def folding(
    transcript: Transcript, fit: FitResult, left_out: Sequence[Sequence[int]]
) -> Folding | None:
    """What the move `fit` made folds into the summary (None: it left nothing new out, or
    the summary could not go with it). `left_out` are the send's stored spans (seqs)."""
    slot, positions = transcript.summary, transcript.positions
    if slot is None or positions is None or positions.head_seq is None or not left_out:
        return None
    if not fit.cut_moved or fit.summary_dropped:
        return None
    first_seq = positions.head_seq + 2
    last_seq = left_out[-1][1]
    if slot.covers is not None and last_seq <= slot.covers[1]:
        return None
    prior = positions.prior_turns
    user_seqs = sorted(s for s in prior if s >= first_seq)
    folded = [s for s in user_seqs if s <= last_seq]
    after = [s for s in user_seqs if s > last_seq]
    if folded:
        turns = prior[folded[0]] + 1, prior[folded[-1]] + 1
    elif after and prior[after[0]] > 1:
        # The folded turns were not read: a step of the previous turn moved the cut past
        # them after its first request. They end right before the first turn read after
        # them; the call quotes them from the store (the replayed request lacks them).
        turns = 2, prior[after[0]]
    else:
        return None
    following = [i for i, s in enumerate(positions.seqs) if s is not None and s > last_seq]
    first_kept = None
    if following:
        text = transcript.messages[following[0]].get("content")
        first_kept = text[:40] if isinstance(text, str) else None
    return Folding((first_seq, last_seq), *turns, first_kept)


def instruction(
    fold: Folding,
    *,
    tokens: int,
    base: str | None = None,
    gap: Sequence[tuple[int, str, str]] = (),
) -> Message:
    """The one message the summary call adds to the replayed request. `base` is the text of
    a newer summary than the one the request carries (written after its send had gone);
    `gap` are (turn number, question, answer) of folded turns the request does not hold."""
    words = max(20, tokens * 3 // 4)
    stop = (
        f", stopping before the message that begins {fold.first_kept!r}" if fold.first_kept else ""
    )
    parts = [
        f"Before we go on: summarize turns {fold.first_turn} to {fold.last_turn} of this "
        f"conversation (user messages counted from 1){stop}, merged with the summary at its "
        "start if there is one; your summary will replace them. Skip the opening exchange "
        "and pinned turns: they stay."
    ]
    if base:
        parts.append("Start from this newer summary of the earlier part:\n\n" + base)
    if gap:
        quoted = "\n\n".join(
            f"Turn {number}, user: {question}\nTurn {number}, assistant: {answer}"
            for number, question, answer in gap
        )
        parts.append("These turns are not shown above; cover them too:\n\n" + quoted)
    parts.append(
        "Keep facts, decisions, names, open questions and requests. Quote code, JSON, "
        "numbers and exact values verbatim in backticks, each with its turn, as (turn 12); "
        f"never paraphrase them. At most about {words} words; answer with the summary only."
    )
    return {"role": "user", "content": "\n\n".join(parts)}


def with_new_summary(
    transcript: Transcript,
    fit: FitResult,
    content: str,
    version: int,
    summary_id: int,
    covers: Span,
) -> tuple[Transcript, FitResult]:
    """The plan's transcript and fit with a new summary in the slot (the room it was sized
    at is unchanged, so the fit stays within its budget)."""
    slot = transcript.summary
    assert slot is not None, "a summary is swapped into a slot"
    new = slot_messages(content)
    messages = list(transcript.messages)
    old = messages[slot.index], messages[slot.index + 1]
    messages[slot.index : slot.index + 2] = new
    estimates = list(transcript.sizes())
    old_size = estimates[slot.index] + estimates[slot.index + 1]
    estimates[slot.index : slot.index + 2] = [estimate_message(m) for m in new]
    counts = {
        t: [None if i in (slot.index, slot.index + 1) else c for i, c in enumerate(column)]
        for t, column in transcript.counts.items()
    }
    new_slot = dataclasses.replace(slot, version=version, summary_id=summary_id, covers=covers)
    transcript = dataclasses.replace(
        transcript, messages=messages, estimates=estimates, counts=counts, summary=new_slot
    )
    sent = list(fit.messages)
    found = [i for i, m in enumerate(sent) if m is old[0]]
    if found:
        sent[found[0] : found[0] + 2] = new
        added = 0
    else:
        preamble, turns = split_turns(sent)
        at = len(preamble) + (len(turns[0]) if turns else 0)
        sent[at:at] = new
        added = 2
    fit = dataclasses.replace(
        fit,
        messages=sent,
        raw_estimate=fit.raw_estimate
        + sum(estimates[slot.index : slot.index + 2])
        - (old_size if found else 0),
        counted_tokens=None,
        sent_messages=fit.sent_messages + added,
        summary_sent=True,
    )
    return transcript, fit


def carried(slot: SummarySlot | None, fit: FitResult) -> int | None:
    """The version a send carries (None: no summary went with it)."""
    return slot.version if slot is not None and fit.summary_sent else None


def squeezed(gap: Sequence[tuple[int, str, str]], chars: int) -> list[tuple[int, str, str]]:
    """Quoted turns cut to about `chars` in all (each side of each turn to an equal share),
    so a summary call that must quote turns its replayed request lacks still fits."""
    if not gap or chars <= 0:
        return []
    share = max(40, chars // (2 * len(gap)))
    return [
        (number, _cut(question, share), _cut(answer, share)) for number, question, answer in gap
    ]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


FALLBACK_SYSTEM = "You write summaries of conversations, for the model that continues them."


def fallback_request(
    fold: Folding,
    *,
    tokens: int,
    previous: str | None,
    turns: Sequence[tuple[int, str, str]],
) -> list[Message]:
    """The summary call for a move whose replayed request cannot fit the window (it leaves
    too little room for the instruction and the summary): a request of its own, which the
    engine's cache cannot serve, holding the previous summary and the turns the move left
    out, (turn number, question, answer) already cut to fit (`squeezed`). It asks the same
    as `instruction`: code, JSON, numbers and exact values quoted with their turn."""
    words = max(20, tokens * 3 // 4)
    parts = [
        f"Summarize turns {fold.first_turn} to {fold.last_turn} of a conversation (user "
        "messages counted from 1), merged with the earlier summary if there is one; your "
        "summary will replace them and it."
    ]
    if previous:
        parts.append("The earlier summary:\n\n" + previous)
    quoted = "\n\n".join(
        f"Turn {number}, user: {question}\nTurn {number}, assistant: {answer}"
        for number, question, answer in turns
    )
    parts.append("The turns:\n\n" + (quoted or "(none could be shown)"))
    parts.append(
        "Keep facts, decisions, names, open questions and requests. Quote code, JSON, "
        "numbers and exact values verbatim in backticks, each with its turn, as (turn 12); "
        f"never paraphrase them. At most about {words} words; answer with the summary only."
    )
    return [
        {"role": "system", "content": FALLBACK_SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
