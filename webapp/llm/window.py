"""The bound: fit a transcript into the context window of the model that will serve it.

A transcript is the system prompt, then turns. A turn starts at a user message
and holds everything that answers it (assistant text, tool calls and their
results), so dropping whole turns can never separate a tool call from its
result. The head (system prompt and opening exchange) and the newest turn are
never dropped; when the rest does not fit, the oldest turns in between go
first, so what is left out is always the contiguous run right after the head.
That rule is what lets a review page rebuild, from the stored count alone,
exactly which turns a send left out.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from webapp.llm.catalog import ModelSpec
from webapp.llm.estimator import REPLY_PRIMING, estimate_message, estimate_tools
from webapp.llm.providers.base import Message

log = logging.getLogger(__name__)

SAFETY_FRACTION = 0.03
"""Kept free of every window: the estimate is good, not exact."""


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


def default_reserve(model: ModelSpec) -> int:
    """Room for the answer when neither the call nor the configuration names max_tokens."""
    if model.max_output_tokens:
        return model.max_output_tokens
    return max(1000, math.ceil(model.window * 0.02))


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


def fit(
    messages: Sequence[Message],
    model: ModelSpec,
    tools: list[dict] | None = None,
    reserve: int | None = None,
    *,
    estimates: Sequence[int] | None = None,
    calibration: float = 1.0,
) -> FitResult:
    """Keep what fits of `messages` for `model`, dropping whole turns oldest first.

    `estimates` are the stored per-message raw estimates (so a send never
    re-estimates history); `calibration` is the model's learned factor, >= 1.
    """
    reserve = default_reserve(model) if reserve is None else reserve
    budget = budget_for(model, reserve)
    sizes = list(estimates) if estimates is not None else [estimate_message(m) for m in messages]
    fixed_cost = estimate_tools(tools) + REPLY_PRIMING

    def calibrated(raw: int) -> int:
        return math.ceil(raw * calibration)

    preamble, turns = split_turns(messages)
    turn_sizes = [sum(sizes[i] for i in turn) for turn in turns]
    floor_raw = fixed_cost + sum(sizes[i] for i in preamble)
    if turns:
        floor_raw += turn_sizes[0] + (turn_sizes[-1] if len(turns) > 1 else 0)

    middle = list(range(1, len(turns) - 1))
    kept_middle: list[int] = []
    raw = floor_raw
    for turn_index in reversed(middle):
        if calibrated(raw + turn_sizes[turn_index]) > budget:
            break
        raw += turn_sizes[turn_index]
        kept_middle.append(turn_index)
    kept_middle.reverse()

    kept_turn_indices = (
        [0, *kept_middle, len(turns) - 1] if len(turns) > 1 else list(range(len(turns)))
    )
    kept_message_indices = preamble + [i for t in kept_turn_indices for i in turns[t]]
    estimated = calibrated(raw)
    overflow = estimated > budget
    if overflow:
        log.warning(
            "overflow at the floor: model=%s budget=%d estimate=%d; sending head and newest turn",
            model.name,
            budget,
            estimated,
        )
    return FitResult(
        messages=[messages[i] for i in sorted(kept_message_indices)],
        dropped_turns=len(middle) - len(kept_middle),
        kept_turns=len(kept_turn_indices),
        estimated_tokens=estimated,
        budget=budget,
        window=model.window,
        reserve=reserve,
        overflow_at_floor=overflow,
        model=model.name,
        raw_estimate=raw,
    )
