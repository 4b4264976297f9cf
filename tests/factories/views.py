"""What the pages draw, built alone, for the tests of the words a view chooses."""

from __future__ import annotations

from typing import Any

from webapp.chat.web.views import Meter


def meter(**overrides: Any) -> Meter:
    """A meter of a send that fitted `small`'s window with room to spare; `overrides` say
    what differs."""
    fields: dict[str, Any] = {
        "model": "small",
        "window": 1024,
        "budget": 900,
        "estimated_tokens": 600,
        "dropped_turns": 0,
    }
    return Meter(**{**fields, **overrides})
