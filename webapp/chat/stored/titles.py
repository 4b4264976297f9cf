"""Conversation titles: what a user may name one, the name a first message gives it, and
the marks a fork or an import carries (shown as a tag, never cut off with the title)."""

from __future__ import annotations

from webapp.chat.stored.attachments import split_attachment
from webapp.errors import InvalidInput, refuse_nul

DEFAULT_TITLE = "New conversation"
TITLE_MAX = 200
FIRST_MESSAGE_TITLE = 60
ELLIPSIS = "…"

FORK_MARK = "fork"
IMPORT_MARK = "imported"
MARKS = (FORK_MARK, IMPORT_MARK)
"""Where a conversation came from, kept as a suffix " (fork)" / " (imported)" of its title:
the sidebar and the header show it as a tag of its own, and a rename may drop it."""


def clean_title(title: str) -> str:
    title = " ".join(refuse_nul(title, "the title").split())
    if not title:
        raise InvalidInput("the title is empty")
    if len(title) > TITLE_MAX:
        raise InvalidInput(f"the title is {len(title)} characters; the limit is {TITLE_MAX}")
    return title


def cut_at_word(text: str, limit: int) -> str:
    """`text` with its whitespace collapsed, at most `limit` characters: when longer, cut
    after the last whole word that fits, with an ellipsis (mid-word only for a single word
    longer than the limit)."""
    words = " ".join(text.split())
    if len(words) <= limit:
        return words
    room = words[: limit - len(ELLIPSIS)]
    head = room.rsplit(" ", 1)[0] if " " in room and words[len(room)] != " " else room
    return head.rstrip(" ,.;:-") + ELLIPSIS


def title_from(content: str) -> str:
    """A new conversation is named after its first message, until its owner renames it."""
    return cut_at_word(content, FIRST_MESSAGE_TITLE) or DEFAULT_TITLE


def first_title(content: str) -> str:
    """The title a first message gives its conversation, from what was typed, never a
    file's wrapper (a message of files alone: the first file's name). The model's title
    replaces it only while it is still this (`chat.naming`)."""
    typed, found, _, _ = split_attachment(content)
    name = None
    while found is not None:
        name = found.name
        typed, found, _, _ = split_attachment(typed)
    return title_from(typed if typed.strip() else (name or content))


def marked(title: str, mark: str) -> str:
    """`title` with a mark of where it came from, within the title's length limit."""
    base, existing = split_mark(title)
    suffix = f" ({mark})"
    return base[: TITLE_MAX - len(suffix)] + suffix if existing != mark else title


def fork_title(title: str) -> str:
    return marked(title, FORK_MARK)


def import_title(title: str) -> str:
    return marked(title, IMPORT_MARK)


def split_mark(title: str) -> tuple[str, str | None]:
    """('Trip plans', 'fork') for 'Trip plans (fork)': the title and its mark, if any."""
    for mark in MARKS:
        suffix = f" ({mark})"
        if title.endswith(suffix) and len(title) > len(suffix):
            return title[: -len(suffix)], mark
    return title, None
