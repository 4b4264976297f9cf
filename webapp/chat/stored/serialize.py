"""Rows as the JSON API spells them (docs/design.md section 5): one shape for API, SSE and pages."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from webapp.chat.stored.branches import Alternatives
from webapp.chat.stored.feedback import feedback_word
from webapp.chat.stored.models import Conversation, Message, Status
from webapp.stored import id_of
from webapp.timeutil import as_utc


def _iso(value: datetime) -> str:
    return as_utc(value).isoformat().replace("+00:00", "Z")


FIT_COLUMNS = {
    "model": "fit_model",
    "window": "fit_window",
    "reserve": "fit_reserve",
    "budget": "fit_budget",
    "estimated_tokens": "fit_estimated_tokens",
    "overflow_at_floor": "fit_overflow_at_floor",
    "counted_by": "fit_counted_by",
    "left_out": "fit_left_out",
    "pins_left_out": "fit_pins_dropped",
    "trim_to": "fit_trim_to",
    "cut_moved": "fit_cut_moved",
    "instructions_tokens": "fit_instructions_tokens",
    "cleared": "fit_cleared",
    "summary": "fit_summary",
}
"""The `fit` object's keys and the user-row columns they are read from (and, on import,
written back to)."""


def fit_dict(row: Message) -> dict[str, Any] | None:
    """A user row's fit facts (None when no fit was evaluated)."""
    if row.dropped_turns is None:
        return None
    fit = {key: getattr(row, column) for key, column in FIT_COLUMNS.items()}
    fit["left_out"] = fit["left_out"] or []
    fit["pins_left_out"] = fit["pins_left_out"] or 0
    fit["cut_moved"] = bool(fit["cut_moved"])
    fit["cleared"] = fit["cleared"] or []
    carried = row.fit_attachments or {}
    fit["attachments_sent"] = carried.get("sent", [])
    fit["attachments_left_out"] = carried.get("left_out", [])
    return fit


def message_dict(row: Message, alternatives: Alternatives | None = None) -> dict[str, Any]:
    """Every stored field of a message, plus `alternatives` (null unless the caller read
    the turn's alternatives and there are some)."""
    usage = None
    if row.prompt_tokens is not None or row.completion_tokens is not None:
        usage = {
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
            "cached_tokens": row.cached_tokens,
            "evaluated_tokens": row.evaluated_tokens,
            "cache_write_tokens": row.cache_write_tokens,
        }
    return {
        "id": row.id,
        "seq": row.seq,
        "role": row.role,
        "content": row.content,
        "status": row.status,
        "created_at": _iso(row.created_at),
        "estimated_tokens": row.estimated_tokens,
        "token_counts": {"estimate": row.estimated_tokens, **(row.token_counts or {})},
        "pinned": bool(row.pinned),
        "dropped_turns": row.dropped_turns,
        "fit": fit_dict(row),
        "model": row.model,
        "usage": usage,
        "finish_reason": row.finish_reason,
        "error": row.error,
        "feedback": feedback_word(row.feedback),
        "alternatives": _alternatives(alternatives),
        "attachments": row.attachments or [],
        "tool_calls": row.tool_calls,
        "tool_call_id": row.tool_call_id,
        "name": row.tool_name,
    }


def conversation_dict(
    row: Conversation,
    messages: list[Message] | None = None,
    alternatives: Mapping[int, Alternatives] | None = None,
    *,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """A conversation; with `messages` (its active branch), each message also says its
    `alternatives` (`{index, count, ids}`, or null when it has none)."""
    data: dict[str, Any] = {
        "id": row.id,
        "title": row.title,
        "configuration": row.configuration,
        "preset": row.preset_id,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
        "pinned": bool(row.pinned),
        "archived": bool(row.archived),
        "kind": row.kind,
        "tags": tags or [],
    }
    if messages is not None:
        alternatives = alternatives or {}
        data["messages"] = [message_dict(m, alternatives.get(id_of(m))) for m in messages]
    return data


def _alternatives(found: Alternatives | None) -> dict[str, Any] | None:
    return None if found is None else found.as_dict()


def preview_dict(row: Message) -> dict[str, Any]:
    """What `POST .../preview` answers: the fit the next send would make."""
    return {
        "dropped_turns": row.dropped_turns,
        "left_out": row.fit_left_out or [],
        "fit": fit_dict(row),
    }


STATUS_LABELS = {
    Status.STREAMING: "Writing…",
    Status.STOPPED: "Stopped",
    Status.FAILED: "Failed",
    Status.INTERRUPTED: "Interrupted",
}


def status_label(status: str) -> str | None:
    """A row's status in words, when it is worth saying (a tool row's outcome is not a
    message status: None)."""
    return _LABELS.get(status)


_LABELS = {status.value: label for status, label in STATUS_LABELS.items()}


def left_out_words(dropped: int, pins: int, model: str | None, *, will: bool = False) -> str:
    """'3 earlier turns were not sent to small (1 of them pinned)', said once for the
    marker, the meter and the review."""
    verb = "will not be" if will else ("was not" if dropped == 1 else "were not")
    noun = "turn" if dropped == 1 else "turns"
    pinned = f" ({pins:,} of them pinned)" if pins else ""
    to = f" to {model}" if model else ""
    return f"{dropped:,} earlier {noun} {verb} sent{to}{pinned}"
