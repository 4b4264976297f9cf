"""Thumbs up or down on an answer: how it is spelled (`"up"`, `"down"`, null) and stored
(1, -1, NULL), and what a second press of the same thumb does (takes it back)."""

from __future__ import annotations

from webapp.errors import InvalidInput

FEEDBACK = {"up": 1, "down": -1}
WORDS = {number: word for word, number in FEEDBACK.items()}


def feedback_value(word: str | None) -> int | None:
    """The stored value of `"up"`, `"down"` or None (no feedback); InvalidInput else."""
    if word is None:
        return None
    if word not in FEEDBACK:
        raise InvalidInput(f"feedback is up, down or null, not {word!r}")
    return FEEDBACK[word]


def feedback_word(value: int | None) -> str | None:
    return WORDS.get(value) if value is not None else None


def toggled(current: int | None, pressed: int) -> int | None:
    """A thumb pressed again takes the feedback back; the other thumb replaces it."""
    return None if current == pressed else pressed
