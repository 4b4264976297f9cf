"""Conversation titles: what a user may name one, and the name a first message gives it."""

from __future__ import annotations

from webapp.errors import InvalidInput, refuse_nul

DEFAULT_TITLE = "New conversation"
TITLE_MAX = 200


def clean_title(title: str) -> str:
    title = " ".join(refuse_nul(title, "the title").split())
    if not title:
        raise InvalidInput("the title is empty")
    if len(title) > TITLE_MAX:
        raise InvalidInput(f"the title is {len(title)} characters; the limit is {TITLE_MAX}")
    return title


def title_from(content: str) -> str:
    """A new conversation is named after its first message, until its owner renames it."""
    words = " ".join(content.split())
    return words if len(words) <= 60 else words[:57].rstrip() + "..."


def fork_title(title: str) -> str:
    suffix = " (fork)"
    return title[: TITLE_MAX - len(suffix)] + suffix
