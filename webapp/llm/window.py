"""The bound: fit a transcript into the context window of the model that will serve it.

A transcript is the system prompt, then turns. A turn starts at a user message
and holds everything that answers it (assistant text, tool calls and their
results), so dropping whole turns can never separate a tool call from its
result. The head (system prompt and opening exchange) and the newest turn are
never dropped; when the rest does not fit, the oldest turns in between go
first. Pinned turns outrank the rest: they are kept before any other old turn.
What was left out is returned as spans and stored with the send, so no page ever
has to rebuild it from a count and today's rule.

The cut stays where the previous send of the branch put it. An engine reuses the
longest prefix its last prompt shares with the new one, so a cut that moved by one
turn on every send would change the prompt right after the head and make the engine
evaluate the whole window again. While what the previous send kept still fits with
the new turn, nothing more is left out: the request is the previous one plus its
answer plus the new turn. When it no longer fits, the cut moves in one large step,
down to `trim_to` of the budget, which leaves room for the next several sends to be
pure appends again. `trim_to = 1.0` is the plain rule: the newest turns that fit.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from webapp.llm import clearing
from webapp.llm.catalog import ModelSpec
from webapp.llm.estimator import REPLY_PRIMING, estimate_message, estimate_tools
from webapp.llm.providers.base import Message

log = logging.getLogger(__name__)

SAFETY_FRACTION = 0.03
"""Kept free of every window: the estimate is good, not exact."""


Span = tuple[int, int]
"""An inclusive run of indices (or, once stored, of sequence numbers)."""


@dataclass(frozen=True, slots=True)
class FitResult:
    messages: list[Message]
    dropped_turns: int
    kept_turns: int
    estimated_tokens: int
    budget: int
    window: int
    reserve: int
    overflow_at_floor: bool
    model: str
    raw_estimate: int
    """The estimate before the model's calibration factor; what calibration learns against."""
    left_out: tuple[Span, ...] = ()
    """Inclusive spans of indices into the messages given to fit() that were not sent."""
    counted_by: str = "estimate"
    """The tokenizer the sizes came from (see `webapp.llm.counting`)."""
    pins_dropped: int = 0
    """Pinned turns that had to go because head, pins and newest turn did not fit."""
    counted_tokens: int | None = None
    """The exact content tokens of what was sent, when every sent message had a count:
    what the per-message template overhead learns against."""
    sent_messages: int = 0
    turns_left: int | None = None
    """About how many more turns the size of the sent ones fit before the cut must move
    (None: no answered turn was sent to size them by)."""
    trim_to: float = 1.0
    cut_moved: bool = False
    """This send left out turns that a pure append of the previous send would have kept:
    it moved the cut, or started it afresh and had to leave something out (or cleared
    tool results the previous send had not)."""
    cleared: tuple[tuple[int, int], ...] = ()
    """Tool results sent as stubs (`webapp.llm.clearing`): (index into the messages given
    to fit(), the result's tokens)."""
    summary_sent: bool = False
    """The transcript's summary went with the send (see `SummarySlot`)."""
    summary_dropped: bool = False
    """Head, pins, summary and newest turn did not fit: the summary went first."""


@dataclass(frozen=True, slots=True)
class SummarySlot:
    """Where a transcript keeps the summary of what its cut left out (`webapp.llm.summaries`):
    a user message and its acknowledgement right after the head, so templates that want
    strictly alternating roles take it. The slot is sized at `room` whatever it holds, so
    a new summary swapped in at a move never outgrows the fit it was planned in; an empty
    slot (no summary yet) keeps the room and sends nothing."""

    index: int
    """The slot's user message in the transcript's messages (its acknowledgement follows)."""
    room: int
    """Raw-estimate tokens kept for it on every send."""
    version: int | None = None
    """The version it holds (None: empty)."""
    summary_id: int | None = None
    covers: Span | None = None
    """The [first_seq, last_seq] it stands for."""


@dataclass(frozen=True, slots=True)
class Transcript:
    """What a send asks to have sent, as loaded: possibly already without some old turns.

    `omitted_turns` counts turns right after the head that the loader did not read
    because even the largest budget in the route could not hold them; they count
    as dropped, exactly as if fit() had dropped them.
    """

    messages: list[Message]
    estimates: list[int] | None = None
    omitted_turns: int = 0
    counts: Mapping[str, Sequence[int | None]] = field(default_factory=dict)
    """Exact content counts per tokenizer id, one per message (None: not counted yet)."""
    pinned: tuple[int, ...] = ()
    """Indices of the user messages whose turns are pinned."""
    ids: Sequence[int | None] | None = None
    """The stored row of each message, when it has one: where new counts are kept."""
    keep_from: int = 0
    """Where the previous send's cut left this history, for the route's first model: the
    index of the first message after what it left out (0: no cut to keep; see `fit`)."""
    positions: Positions | None = None
    """Where each message is stored, when the transcript was read from a conversation."""
    attachments: Mapping[int, Sequence[str]] = field(default_factory=dict)
    pictures: Mapping[int, Sequence[tuple[int, int]]] = field(default_factory=dict)
    """The size (width, height, as stored) of each picture a message carries (by index):
    its exact count is its text's plus each picture by the model's provider rule."""
    """The files each message carries (by index): what a fit sent or left out with it."""
    clear_keep: int | None = None
    """The configuration's `keep_tool_results` when older tool results may be cleared
    (`webapp.llm.clearing`; None: they never are, as on the gateway)."""
    cleared_through: int = 0
    """Where the previous send's clearing left this history: results before this index
    were sent as stubs (0: none)."""
    summary: SummarySlot | None = None
    """The summary of what earlier cuts left out, when the conversation keeps one."""

    def sizes(self) -> list[int]:
        return (
            self.estimates
            if self.estimates is not None
            else [estimate_message(m) for m in self.messages]
        )


@dataclass(frozen=True, slots=True)
class Positions:
    """Where the messages of a transcript read from a conversation are stored, so what a
    fit left out can be said as stored rows (the spans a user row keeps)."""

    seqs: tuple[int | None, ...]
    """Each message's seq (None for the system prompt)."""
    prior_turns: Mapping[int, int]
    """User seq -> replayable turns before it, for every user message sent or not."""
    head_seq: int | None
    """The head turn's user seq, when there is a head."""
    runs: tuple[Span, ...] = ()
    """The branch the send goes down, as its runs: inclusive seq ranges, newest first."""

    def cleared(self, fit: FitResult) -> list[dict[str, int]] | None:
        """The tool results the send carried as stubs, as stored spans (None: none)."""
        return clearing.seq_spans(fit.cleared, self.seqs) or None

    def left_out(self, fit: FitResult) -> list[list[int]]:
        """What a send left out, as inclusive [first_seq, last_seq] spans of stored rows.

        A span is a run of stored messages between the head and the newest turn that the
        send did not include and that holds at least one turn left out to fit (a failed
        turn lying among them was not sent either; one alone is not a left-out turn).
        The runs come from the sent turns' seqs; whether a run holds left-out turns comes
        from `prior_turns`, so turns never read (far back in a long conversation) count
        too. The rows between two sent turns are clipped to the branch's runs, so the
        spans never name a row of another branch.
        """
        if self.head_seq is None:
            return []
        unsent = {i for first, last in fit.left_out for i in range(first, last + 1)}
        sent = sorted(
            seq
            for index, seq in enumerate(self.seqs)
            if seq is not None and index not in unsent and seq in self.prior_turns
        )
        ends: dict[int, int] = {}  # user seq -> its turn's last stored row (tool steps)
        current: int | None = None
        for seq in self.seqs:
            if seq is None:
                continue
            if seq in self.prior_turns:
                current = seq
            if current is not None and seq > ends.get(current, current + 1):
                ends[current] = seq
        spans = []
        for before, after in pairwise(sent):
            if self.prior_turns[after] - self.prior_turns[before] - 1 > 0:
                first, last = ends.get(before, before + 1) + 1, after - 1
                spans += [
                    [max(first, start), min(last, end)]
                    for start, end in reversed(self.runs)
                    if start <= last and end >= first
                ]
        return spans


def default_reserve(model: ModelSpec) -> int:
    """Room for the answer when neither the call nor the configuration names max_tokens."""
    if model.max_output_tokens:
        return model.max_output_tokens
    return max(1000, math.ceil(model.window * 0.02))


def reserve_of(max_tokens: int | None, model: ModelSpec) -> int:
    """The answer's room: the call's or configuration's max_tokens, else the model's."""
    return max_tokens if max_tokens is not None else default_reserve(model)


def budget_for(model: ModelSpec, reserve: int) -> int:
    """Prompt tokens a send may use: the window less the answer's room and a safety margin."""
    return model.window - reserve - math.ceil(model.window * SAFETY_FRACTION)


def split_turns(messages: Sequence[Message]) -> tuple[list[int], list[list[int]]]:
    """Indices of the preamble (system prompt and anything before the first user message)
    and of each turn, in order."""
    preamble: list[int] = []
    turns: list[list[int]] = []
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            turns.append([index])
        elif turns:
            turns[-1].append(index)
        else:
            preamble.append(index)
    return preamble, turns


def runs_of(indices: Sequence[int]) -> tuple[Span, ...]:
    """Sorted indices as inclusive runs: [3, 4, 5, 9] -> ((3, 5), (9, 9))."""
    spans: list[Span] = []
    for index in indices:
        if spans and spans[-1][1] == index - 1:
            spans[-1] = (spans[-1][0], index)
        else:
            spans.append((index, index))
    return tuple(spans)


def kept_from(left_out: Sequence[Sequence[int]]) -> int:
    """Where a send's cut leaves the history for the next send (its `keep_from`): just
    after the last thing it left out, as an index or a seq like the spans (0: it left
    nothing out)."""
    return left_out[-1][1] + 1 if left_out else 0


def fit(
    messages: Sequence[Message],
    model: ModelSpec,
    tools: list[dict[str, Any]] | None = None,
    reserve: int | None = None,
    *,
    estimates: Sequence[int] | None = None,
    calibration: float = 1.0,
    counts: Sequence[int | None] | None = None,
    overhead: int = 0,
    pinned: Collection[int] = (),
    counted_by: str = "estimate",
    trim_to: float = 1.0,
    keep_from: int = 0,
    unread_before: bool = False,
    clear_keep: int | None = None,
    cleared_through: int = 0,
    summary: int | None = None,
    summary_room: int = 0,
) -> FitResult:
    """Keep what fits of `messages` for `model`: the head and the newest turn always, then
    pinned turns (newest pins first), then the newest other turns, dropping whole turns.

    `keep_from` is where the previous send's cut left the branch: the index of the first
    message after the turns it left out (0: no cut to keep, the cut starts afresh). Turns
    before it stay out (but for the head and pins) while the rest fits the budget; when it
    does not, unpinned turns are kept, newest first, only up to `trim_to` of the budget.
    `unread_before` says that turns after the head and before the given ones were never
    loaded because they could not fit: then what stays from `keep_from` cannot fit either.

    Sizes: a message with an exact count (`counts`, from the model's own tokenizer)
    costs that count plus the learned per-message template `overhead`; any other costs
    its stored raw estimate (`estimates`, so a send never re-estimates history) times
    the model's `calibration`. `pinned` are indices of user messages whose turns the
    user pinned. Kept pins come before unpinned turns: once a pin has to go, so do all
    older pins and every unpinned turn, which keeps what is left out easy to say.

    Tool results (with `clear_keep`, see `webapp.llm.clearing`): those before
    `cleared_through` are sent as stubs, as the previous send did; when the cut moves,
    every result older than the newest `clear_keep` answered turns becomes a stub too,
    before any turn is left out.

    `summary` is the index of a summary slot's user message (`SummarySlot`): it costs
    `summary_room` whatever it holds, it is kept right after the floor, before any pin,
    and it is the first thing to go when head, pins, summary and newest turn do not fit.
    An empty slot (its content "") keeps its room and is never sent.
    """
    reserve = default_reserve(model) if reserve is None else reserve
    budget = budget_for(model, reserve)
    raw_sizes = (
        list(estimates) if estimates is not None else [estimate_message(m) for m in messages]
    )
    exact = list(counts) if counts is not None else [None] * len(messages)
    # Two integer sums, multiplied once: what was counted exactly (plus its template
    # overhead) and the raw estimate of the rest, so no float rounding creeps in.
    counted_part = [0 if c is None else c + overhead for c in exact]
    estimated_part = [raw if c is None else 0 for raw, c in zip(raw_sizes, exact, strict=True)]
    fixed_raw = estimate_tools(tools) + REPLY_PRIMING
    # Tool schemas and priming are always estimated; beside exact counts the factor may
    # only raise them (it was learned from whole prompts, whose text was counted exactly).
    fixed_factor = calibration if counts is None else max(calibration, 1.0)

    preamble, turns = split_turns(messages)
    results = clearing.results(messages) if clear_keep is not None and turns else []
    stubs: dict[int, int] = {}

    def clear_to(limit: int) -> None:
        """Size every result before `limit` as its stub."""
        for i in results:
            if i >= limit:
                break
            if i not in stubs:
                stubs[i] = clearing.stub_size(messages[i], raw_sizes[i])
            counted_part[i], estimated_part[i] = 0, stubs[i]

    # The newest turn's own results are never cleared.
    cleared_to = first_cleared = min(cleared_through, turns[-1][0]) if results else 0
    clear_to(cleared_to)
    turn_of = {turn[0]: t for t, turn in enumerate(turns)}
    slot = turn_of.get(summary) if summary is not None else None
    if slot is not None:
        for i in turns[slot]:  # the slot costs its room, whatever it holds
            counted_part[i] = estimated_part[i] = 0
    floor_turns = {0, len(turns) - 1} if turns else set()
    kept = set(floor_turns)
    floor = preamble + [i for t in floor_turns for i in turns[t]]
    spent = [sum(counted_part[i] for i in floor), sum(estimated_part[i] for i in floor)]

    def tokens(counted: int, estimated: int) -> int:
        if counts is None:  # all estimated: exactly the seed's rule, ceil(raw * factor)
            return math.ceil((estimated + fixed_raw) * calibration)
        return math.ceil(counted + estimated * calibration + fixed_raw * fixed_factor)

    def try_add(t: int, limit: int = budget) -> bool:
        if t == slot:  # placed (or dropped) once, before the pins
            return True
        counted = spent[0] + sum(counted_part[i] for i in turns[t])
        estimated = spent[1] + sum(estimated_part[i] for i in turns[t])
        if tokens(counted, estimated) > limit:
            return False
        spent[:] = [counted, estimated]
        kept.add(t)
        return True

    pins = sorted({turn_of[i] for i in pinned if i in turn_of} - floor_turns - {slot}, reverse=True)
    summary_dropped = False
    if slot is not None and slot not in floor_turns:
        # The summary goes before any pin: it is kept only if head, every pin, it and the
        # newest turn fit together.
        pinned_parts = [i for t in pins for i in turns[t]]
        with_pins = (
            spent[0] + sum(counted_part[i] for i in pinned_parts),
            spent[1] + sum(estimated_part[i] for i in pinned_parts) + summary_room,
        )
        summary_dropped = tokens(*with_pins) > budget
        if not summary_dropped:
            spent[1] += summary_room
            kept.add(slot)
    pins_dropped = 0
    for position, t in enumerate(pins):
        if not try_add(t):
            pins_dropped = len(pins) - position
            break
    # A pure append keeps every turn from the cut on: tried first, against the budget.
    start = max(1, bisect_left([turn[0] for turn in turns], keep_from))
    kept_at_floor, spent_at_floor = set(kept), list(spent)
    stays = (
        not pins_dropped
        and not (unread_before and keep_from == 0)
        and all(try_add(t) for t in range(start, len(turns) - 1))
    )
    forced = (
        stays
        and bool(results)
        and _room_short(turns, raw_sizes, calibration, budget - tokens(*spent))
    )
    kept_if_stayed = set(kept)
    if forced:
        stays = False
    if not stays:
        # The cut moves: the newest turns, up to `trim_to` of the budget.
        kept.intersection_update(kept_at_floor)
        spent[:] = spent_at_floor
        lowest = 1
        if results and (to := clearing.boundary(turns, clear_keep or 0)) > cleared_to:
            # And older tool results are cleared, all at once, before any turn goes; the
            # room they free is kept for the sends to come: no turn the cut had left out
            # is taken back.
            cleared_to, lowest = to, start
            clear_to(cleared_to)
            at_floor = preamble + [i for t in kept for i in turns[t]]
            spent[:] = [
                sum(counted_part[i] for i in at_floor),
                sum(estimated_part[i] for i in at_floor) + (summary_room if slot in kept else 0),
            ]
        limit = math.floor(budget * trim_to)
        for t in range(len(turns) - 2, lowest - 1, -1):
            if pins_dropped or (t not in kept and not try_add(t, limit)):
                break
    elif trim_to >= 1.0:
        # The plain rule takes older turns back whenever they fit again.
        for t in range(start - 1, 0, -1):
            if t not in kept and not try_add(t):
                break
    cut_moved = (
        any(t not in kept for t in range(start, len(turns)) if t != slot)
        or cleared_to > first_cleared
        or (forced and kept != kept_if_stayed)
    )
    summary_sent = slot in kept and messages[turns[slot][0]].get("content") != ""
    counted_turns = len(turns) - (slot is not None)
    if slot in kept:  # its room was spent; an empty slot sends nothing
        kept_turns = len(kept) - 1
        if not summary_sent:
            kept.discard(slot)
    else:
        kept_turns = len(kept)

    answered = [t for t in kept if t not in (len(turns) - 1, slot)]
    turn_tokens = tokens(
        sum(counted_part[i] for t in answered for i in turns[t]),
        sum(estimated_part[i] for t in answered for i in turns[t]),
    ) - tokens(0, 0)
    turns_left = (
        max(0, (budget - tokens(*spent)) * len(answered) // turn_tokens)
        if answered and turn_tokens > 0
        else None
    )
    kept_indices = sorted(preamble + [i for t in kept for i in turns[t]])
    kept_set = set(kept_indices)
    estimated = tokens(*spent)
    overflow = estimated > budget
    if overflow:
        log.warning(
            "overflow at the floor: model=%s budget=%d estimate=%d; sending head and newest turn",
            model.name,
            budget,
            estimated,
        )
    cleared = tuple((i, raw_sizes[i]) for i in results if i < cleared_to and i in kept_set)
    gone = {i for i, _ in cleared}
    kept_counts = [None if i in gone else exact[i] for i in kept_indices]
    all_counted = counts is not None and None not in kept_counts
    if counts is not None and not all_counted:
        counted_by = f"{counted_by}+estimate"
    return FitResult(
        messages=[
            clearing.stub(messages[i], raw_sizes[i]) if i in gone else messages[i]
            for i in kept_indices
        ],
        dropped_turns=counted_turns - kept_turns,
        kept_turns=kept_turns,
        estimated_tokens=estimated,
        budget=budget,
        window=model.window,
        reserve=reserve,
        overflow_at_floor=overflow,
        model=model.name,
        raw_estimate=fixed_raw + sum(stubs[i] if i in gone else raw_sizes[i] for i in kept_indices),
        left_out=runs_of([i for i in range(len(messages)) if i not in kept_set]),
        counted_by=counted_by,
        pins_dropped=pins_dropped,
        counted_tokens=sum(c for c in kept_counts if c is not None) if all_counted else None,
        sent_messages=len(kept_indices),
        turns_left=turns_left,
        trim_to=trim_to,
        cut_moved=cut_moved,
        cleared=cleared,
        summary_sent=summary_sent,
        summary_dropped=summary_dropped,
    )


def _room_short(
    turns: Sequence[Sequence[int]], raw_sizes: Sequence[int], calibration: float, room: int
) -> bool:
    """Whether a send that starts a turn (its question alone so far) leaves less room than
    the previous turn's tool steps took: its own calls and results will be appended and
    can never be cleared while it is answered, so the cut had better move now, while the
    prompt ends with the question, than in the middle of the turn, where the engine must
    evaluate the turn's results again as well."""
    if len(turns) < 3 or len(turns[-1]) != 1:
        return False
    steps = turns[-2][1:-1]
    return bool(steps) and math.ceil(sum(raw_sizes[i] for i in steps) * calibration) > room
