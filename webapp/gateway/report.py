"""What the gateway did to a call, as the answer's `webapp` object and headers say it.

No peer tells a client which of its messages the model did not see; this does, in
the answer itself, so a script can act on it (summarise, warn, split) without a
second request.
"""

from __future__ import annotations

from typing import Any

from webapp.llm.catalog import ModelSpec
from webapp.llm.manager import CompletionReport
from webapp.llm.providers.base import Usage
from webapp.llm.window import FitResult

DROPPED_TURNS_HEADER = "x-dropped-turns"
COMPLETION_OVERFLOW_HEADER = "x-completion-overflow"


def fit_report(configuration: str, fit: FitResult, usage: Usage | None = None) -> dict[str, Any]:
    """The bound of a chat call. `left_out` holds inclusive [first, last] index spans into
    the request's `messages`: exactly the messages that were not sent. `cached_tokens`
    (what the engine's prompt cache served) is known once the answer is."""
    return {
        "configuration": configuration,
        "model": fit.model,
        "window": fit.window,
        "budget": fit.budget,
        "reserve": fit.reserve,
        "estimated_tokens": fit.estimated_tokens,
        "dropped_turns": fit.dropped_turns,
        "left_out": [[first, last] for first, last in fit.left_out],
        "overflow_at_floor": fit.overflow_at_floor,
        "counted_by": fit.counted_by,
        "trim_to": fit.trim_to,
        "cut_moved": fit.cut_moved,
        "cached_tokens": usage.cached_tokens if usage is not None else None,
    }


def fit_headers(fit: FitResult) -> dict[str, str]:
    return {DROPPED_TURNS_HEADER: str(fit.dropped_turns)}


def completion_report(
    configuration: str, model: ModelSpec, report: CompletionReport | None
) -> dict[str, Any]:
    """A completion is never pruned; when its prompt was larger than the budget it was sent
    all the same and this says so, with the budget and the estimate that exceeded it."""
    return {
        "configuration": configuration,
        "model": model.name,
        "window": model.window,
        "overflow": report is not None,
        "budget": report.budget if report is not None else None,
        "estimated_tokens": report.estimated_tokens if report is not None else None,
        "counted_by": "estimate",
    }
