"""ChatGPT's `conversations.json` (its data export) read as the app's own JSON exports.

Each of its conversations is a tree of nodes (`mapping`: id -> {message, parent,
children}); `current_node` is the leaf its owner last saw. Only what a person wrote and
the text the assistant answered are kept: system, tool and hidden messages (and the
assistant's calls to a tool: a `recipient` other than "all"), and parts
that are not text (images, files), are left out, and their children hang from the nearest
node kept. Consecutive messages of one side are joined, so every path reads as turns,
a question then its answer (a question left unanswered at the end of a path is dropped).

Every path becomes a branch of the app's model (`webapp.chat.stored.history`): turns
shared by paths are stored once, a turn's alternatives (ChatGPT's edits and regenerations)
start runs of their own after the answer they follow, and the path to `current_node` is
the active branch. The result is an export document that `transfer.parse_export` checks
as it checks any import, so one set of rules bounds both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeGuard

from webapp.chat.stored.transfer import FORMAT, MAX_MESSAGES, VERSION, Imported, parse_export
from webapp.errors import InvalidInput

MAX_CONVERSATIONS = 1_000
"""Conversations in one file."""
MAX_NODES = 100_000
"""Nodes over all the file's conversations: what is walked before anything is stored."""
_TEXT_TYPES = {"text", "multimodal_text"}
_ROLES = {"user": "user", "assistant": "assistant"}


@dataclass(frozen=True, slots=True)
class Skipped:
    title: str
    reason: str


@dataclass(slots=True)
class _Turn:
    """A question and its answer on some path, and the turns that follow it."""

    question: str
    answer: str
    created_at: float | None
    children: list[_Turn] = field(default_factory=list)
    current: bool = False
    """On the path to `current_node`."""


def is_chatgpt_export(data: object) -> TypeGuard[list[Any]]:
    """ChatGPT's file is a list of conversations; the app's own export is an object."""
    return isinstance(data, list)


def _text(where: str, message: object) -> tuple[str, str] | None:
    """(role, text) of a message a person would read, or None for anything else."""
    if not isinstance(message, dict):
        return None
    author = message.get("author")
    role = _ROLES.get(str(author.get("role"))) if isinstance(author, dict) else None
    content = message.get("content")
    if role is None or not isinstance(content, dict):
        return None
    if content.get("content_type") not in _TEXT_TYPES:
        return None
    if message.get("recipient") not in (None, "all"):
        return None  # the assistant addressing a tool, not the person
    metadata = message.get("metadata")
    if isinstance(metadata, dict) and metadata.get("is_visually_hidden_from_conversation"):
        return None
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise InvalidInput(f"{where}: content.parts must be a list")
    text = "\n".join(part for part in parts if isinstance(part, str)).strip()
    return (role, text) if text else None


Said = tuple[str, str, float | None]
"""(role, text, time) of a message kept."""
Link = tuple[Said, "Link"] | None
"""A path so far, newest message first: shared by every path below it, never copied."""
MAX_PATH_MESSAGES = 200_000
"""Messages over all of one conversation's paths (a message on several paths counts on
each): a file of many branches off a long conversation is refused, not walked for long."""


def _unlinked(link: Link) -> list[Said]:
    path: list[Said] = []
    while link is not None:
        path.append(link[0])
        link = link[1]
    path.reverse()
    return path


def _paths(where: str, mapping: dict[str, Any], current: object) -> tuple[list[list[Said]], int]:
    """Every root-to-leaf path, as the messages kept, and the index of the path through
    `current_node` (the last path when it names none)."""
    roots = [
        key
        for key, node in mapping.items()
        if not isinstance(node, dict) or node.get("parent") not in mapping
    ]
    paths: list[list[Said]] = []
    walked = 0
    chosen = -1
    seen: set[str] = set()
    stack: list[tuple[str, Link]] = [(root, None) for root in reversed(roots)]
    while stack:
        key, link = stack.pop()
        if key in seen:
            raise InvalidInput(f"{where}: node {key[:40]!r} is reached twice: not a tree")
        seen.add(key)
        node = mapping.get(key)
        if not isinstance(node, dict):
            raise InvalidInput(f"{where}: node {key[:40]!r} must be an object")
        message = node.get("message")
        kept = _text(f"{where}.mapping[{key[:40]!r}]", message)
        if kept is not None:
            created = message.get("create_time") if isinstance(message, dict) else None
            link = ((*kept, _number(created)), link)
        children = node.get("children") or []
        if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
            raise InvalidInput(f"{where}: node {key[:40]!r}'s children must be a list of ids")
        present = [child for child in children if child in mapping]
        if key == current:
            chosen = len(paths)  # a leaf's own path, or an inner node's first below it
        if not present:
            path = _unlinked(link)
            walked += len(path)
            if walked > MAX_PATH_MESSAGES:
                raise InvalidInput(f"{where} has too many branches to import")
            paths.append(path)
        stack.extend((child, link) for child in reversed(present))
    return paths, chosen if chosen >= 0 else len(paths) - 1


def _turns(path: list[Said]) -> list[Said]:
    """A path as (question, answer, time) turns: one side's consecutive messages joined."""
    joined: list[list[Any]] = []
    for role, text, time in path:
        if joined and joined[-1][0] == role:
            joined[-1][1] += "\n\n" + text
        else:
            joined.append([role, text, time])
    if joined and joined[0][0] == "assistant":
        joined.insert(0, ["user", "", joined[0][2]])  # an answer with no question before it
    return [
        (question[1], answer[1], question[2])
        for question, answer in zip(joined[::2], joined[1::2], strict=False)
    ]


def _tree(paths: list[list[Said]], current: int) -> list[_Turn]:
    """The paths' turns merged where paths share them, the current path marked."""
    roots: list[_Turn] = []
    for index, path in enumerate(paths):
        level = roots
        for question, answer, time in _turns(path):
            found = next((t for t in level if (t.question, t.answer) == (question, answer)), None)
            if found is None:
                found = _Turn(question, answer, time)
                level.append(found)
            found.current = found.current or index == current
            level = found.children
    return roots


def _rows(roots: list[_Turn]) -> tuple[list[dict[str, Any]], int | None]:
    """The export's messages, in seq order, and the active branch's last answer: turns
    depth first, so a turn's first child continues it and every other child starts a run
    after the answer it follows (0: the very start)."""
    messages: list[dict[str, Any]] = []
    answered_at: dict[int, int] = {}
    stack: list[tuple[_Turn, int]] = [(turn, 0) for turn in reversed(roots)]
    while stack:
        turn, parent = stack.pop()
        seq = len(messages) + 1
        when = _iso(turn.created_at)
        question: dict[str, Any] = {"role": "user", "content": turn.question, "created_at": when}
        if parent != seq - 1:
            question["parent_seq"] = parent
        messages += [question, {"role": "assistant", "content": turn.answer, "created_at": when}]
        answered_at[id(turn)] = seq + 1
        if len(messages) > MAX_MESSAGES:
            raise InvalidInput(f"a conversation holds at most {MAX_MESSAGES:,} messages")
        stack.extend((child, seq + 1) for child in reversed(turn.children))
    for seq, message in enumerate(messages, start=1):
        message["seq"] = seq
    if not roots:
        return messages, None
    # The current path's last turn; below it, if paths go on, the first of them to a leaf.
    turn = next((t for t in roots if t.current), roots[0])
    while turn.children:
        turn = next((t for t in turn.children if t.current), turn.children[0])
    return messages, answered_at[id(turn)]


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def parse_chatgpt(
    data: list[Any], *, default_configuration: str, known: set[str]
) -> tuple[list[Imported], list[Skipped]]:
    """Every conversation of the file checked whole, before anything is stored: the
    ones to import, and those left out (nothing a person wrote in them) with why."""
    if len(data) > MAX_CONVERSATIONS:
        raise InvalidInput(f"an import holds at most {MAX_CONVERSATIONS:,} conversations")
    nodes = sum(
        len(c["mapping"])
        for c in data
        if isinstance(c, dict) and isinstance(c.get("mapping"), dict)
    )
    if nodes > MAX_NODES:
        raise InvalidInput(f"an import holds at most {MAX_NODES:,} messages in all")
    imported: list[Imported] = []
    skipped: list[Skipped] = []
    for index, conversation in enumerate(data):
        where = f"conversations[{index}]"
        if not isinstance(conversation, dict):
            raise InvalidInput(f"{where} must be an object: is this ChatGPT's conversations.json?")
        title = conversation.get("title")
        title = title.strip()[:200] if isinstance(title, str) and title.strip() else "Untitled"
        mapping = conversation.get("mapping")
        if not isinstance(mapping, dict):
            raise InvalidInput(f"{where}.mapping must be an object of nodes")
        paths, current = _paths(where, mapping, conversation.get("current_node"))
        messages, active = _rows(_tree(paths, current))
        if not messages:
            skipped.append(Skipped(title[:200], "nothing a person wrote or was answered"))
            continue
        document = {
            "format": FORMAT,
            "version": VERSION,
            "conversation": {
                "title": title,
                "created_at": _iso(_number(conversation.get("create_time"))),
                "active_seq": None if active == len(messages) else active,
            },
            "messages": messages,
        }
        try:
            parsed = parse_export(
                document, default_configuration=default_configuration, known=known
            )
        except InvalidInput as error:
            raise InvalidInput(f"{where} ({title[:60]!r}): {error.message}") from None
        imported.append(parsed)
    return imported, skipped


def _number(value: object) -> float | None:
    """A time in seconds since 1970, or None for anything else (a huge one included)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None
