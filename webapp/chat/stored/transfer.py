"""A conversation out of the app and back in: the JSON export (everything, for import)
and a Markdown one (for people, trim markers in words).

The JSON export is every stored message of every branch, in seq order, in the API's own
message shape (`serialize.message_dict`) plus, on every message, `parent_seq`: the
message it follows (the one before it, or for the first turn of a branch the row that
branch continues; 0 for an edit of the very first message), and the conversation's
`active_seq`. So a round trip keeps every branch. Import checks every field before
anything is written, and says which one is wrong.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Integer
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlmodel import Session, col, select

from webapp.chat.stored.branches import oldest_on_branch
from webapp.chat.stored.feedback import feedback_value
from webapp.chat.stored.history import Branch, read_branch
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.chat.stored.rows import owned_in
from webapp.chat.stored.serialize import (
    FIT_COLUMNS,
    _iso,
    conversation_dict,
    left_out_words,
    message_dict,
    status_label,
)
from webapp.chat.stored.steps import step_wire
from webapp.errors import InvalidInput, refuse_nul
from webapp.llm.estimator import estimate_message

FORMAT = "webapp.conversation"
VERSION = 1
MAX_MESSAGES = 20_000
MAX_LEFT_OUT_SPANS = 100_000
"""Over all its sends: what the admin review walks when it shows the conversation."""
MAX_CONTENT = 1_000_000
INT_MAX = 2**31 - 1
"""Every counted column is a 32-bit integer in PostgreSQL."""
STRING_LIMITS = {
    "model": 100,
    "finish_reason": 32,
    "counted_by": 300,
    "error": 100_000,
    "tool_call_id": 200,
    "name": 200,
    "id": 200,
    "arguments": MAX_CONTENT,
}
TOOL_STATUSES = ("ok", "error", "failed", "timeout", "denied")
"""A tool row's status: its call's outcome (`webapp.tools.outcomes.Status`)."""
MAX_TOOL_CALLS = 64
"""Calls one stored step may hold."""


def follows(row: Message) -> int | None:
    """The seq of the message `row` continues (None for the very first)."""
    if row.parent_seq is not None:
        return row.parent_seq
    return row.seq - 1 if row.seq > 1 else None


def export_message(row: Message) -> dict[str, Any]:
    """A message as the JSON export spells it: the API's shape and the seq it follows."""
    return {**message_dict(row), "parent_seq": follows(row)}


def export_json(
    conversation: Conversation, rows: list[Message], preset: str | None = None
) -> dict[str, Any]:
    """`rows`: every stored message, of every branch, in seq order; `preset`: the name of
    the conversation's preset (a name, not an id: an import matches it among the
    importing user's own)."""
    head = {**conversation_dict(conversation), "active_seq": conversation.active_seq}
    return {
        "format": FORMAT,
        "version": VERSION,
        "conversation": {**head, "preset": preset},
        "messages": [export_message(row) for row in rows],
    }


EXPORT_BATCH_BYTES = 256 * 1024
"""About how many bytes of stored text a JSON export reads, holds and encodes at a time
(at least one message): a client that reads slowly, or not at all until the write
deadline drops it, holds one batch, not the conversation."""
EXPORT_BATCH_ROWS = 200
"""The most messages a JSON export reads at a time, however short: each row costs its
reading, an object and its JSON whatever its text (20,000 short messages read at once
held tens of megabytes per export, and the loop for a second on PostgreSQL)."""
EXPORT_ROW_BYTES = 512
"""What a message's JSON holds besides its texts (ids, times, names, numbers), counted in
a batch's bytes."""


class byte_length(FunctionElement[int]):
    """The bytes of a text or JSON value in UTF-8 (0 for NULL): `octet_length` on
    PostgreSQL, the length of its blob on SQLite."""

    type = Integer()
    inherit_cache = True


@compiles(byte_length)
def _byte_length_sqlite(element: byte_length, compiler: SQLCompiler, **kw: Any) -> str:
    return f"coalesce(length(CAST({compiler.process(element.clauses, **kw)} AS BLOB)), 0)"


@compiles(byte_length, "postgresql")
def _byte_length_postgres(element: byte_length, compiler: SQLCompiler, **kw: Any) -> str:
    return f"coalesce(octet_length(CAST({compiler.process(element.clauses, **kw)} AS TEXT)), 0)"


def batch_ends(sizes: list[tuple[int, int]]) -> list[int]:
    """The last seq of each batch, from (seq, bytes) in seq order: at most
    `EXPORT_BATCH_ROWS` rows and about `EXPORT_BATCH_BYTES` bytes a batch."""
    ends: list[int] = []
    held = rows = 0
    for seq, size in sizes:
        size += EXPORT_ROW_BYTES
        if ends and rows < EXPORT_BATCH_ROWS and held + size <= EXPORT_BATCH_BYTES:
            ends[-1] = seq
            held += size
            rows += 1
        else:
            ends.append(seq)
            held, rows = size, 1
    return ends


def export_plan(
    session: Session, owner: str, conversation_id: str
) -> tuple[Conversation, list[int]]:
    """The owner's conversation and where each batch of its JSON export ends (by seq), up
    to the newest message there is now."""
    connection = session.connection()
    conversation = owned_in(connection, owner, conversation_id)
    size = (
        byte_length(col(Message.content))
        + byte_length(col(Message.error))
        + byte_length(col(Message.fit_left_out))
    )
    sizes = connection.execute(
        select(col(Message.seq), size)
        .where(col(Message.conversation_id) == conversation_id)
        .order_by(col(Message.seq))
    ).all()
    return conversation, batch_ends([(seq, nbytes) for seq, nbytes in sizes])


def markdown_plan(
    session: Session, owner: str, conversation_id: str
) -> tuple[Conversation, Branch, list[tuple[int, int]]]:
    """The owner's conversation, its active branch, and the Markdown export's batches of
    that branch as (first seq, rows), sized like the JSON export's (`batch_ends`)."""
    connection = session.connection()
    conversation = owned_in(connection, owner, conversation_id)
    branch = read_branch(connection, conversation_id, conversation.active_seq)
    size = byte_length(col(Message.content)) + byte_length(col(Message.error))
    sizes = [
        (seq, nbytes)
        for seq, nbytes in connection.execute(
            select(col(Message.seq), size)
            .where(col(Message.conversation_id) == conversation_id)
            .order_by(col(Message.seq))
        )
        if seq in branch
    ]
    batches: list[tuple[int, int]] = []
    at = 0
    for last in batch_ends(sizes):
        rows = [seq for seq, _ in sizes[at:] if seq <= last]
        batches.append((rows[0], len(rows)))
        at += len(rows)
    return conversation, branch, batches


def markdown_batch(
    session: Session, conversation_id: str, branch: Branch, start: int, rows: int
) -> list[Message]:
    """`rows` messages of the branch from seq `start` on (a batch of `markdown_plan`)."""
    return oldest_on_branch(session.connection(), conversation_id, branch, start, rows)


def export_batch(session: Session, conversation_id: str, after: int, last: int) -> list[Message]:
    """The messages of one batch: seqs after `after`, up to `last`."""
    query = (
        select(Message)
        .where(
            col(Message.conversation_id) == conversation_id,
            col(Message.seq) > after,
            col(Message.seq) <= last,
        )
        .order_by(col(Message.seq))
    )
    return list(session.exec(query))


def markdown_head(conversation: Conversation) -> str:
    """The Markdown export's head: the title and what the conversation is. The export is
    the conversation as a person reads it (who said what, and where the model was sent
    less than the whole history): the head, then each message of the branch shown
    (`markdown_turn`), joined by a newline, its trailing space cut to one newline."""
    what = f"Configuration: {conversation.configuration} · started {_iso(conversation.created_at)}"
    return f"# {conversation.title}\n\n{what}\n"


def markdown_turn(row: Message) -> str:
    """One message of the Markdown export: who, any trim marker or status, the text."""
    lines: list[str] = []
    if row.role == Role.TOOL:
        lines += [f"### Tool result: {row.tool_name} ({row.status})", "", "```text"]
        return "\n".join([*lines, row.content.replace("```", "` ` `"), "```", ""])
    if row.tool_calls:
        lines.append("### Tool calls")
        lines += [f"- `{call['name']}` {call['arguments']}" for call in row.tool_calls]
        return "\n".join([*lines, "", row.content, ""] if row.content else [*lines, ""])
    if row.role == Role.USER:
        lines.append("## You")
        if row.dropped_turns:
            words = left_out_words(row.dropped_turns, row.fit_pins_dropped or 0, row.fit_model)
            lines += ["", f"> ✂ Sent without older history: {words}."]
    else:
        served = f" ({row.model})" if row.model else ""
        lines.append(f"## Assistant{served}")
        label = status_label(row.status)
        if label:
            lines += ["", f"*{label}{': ' + row.error if row.error else ''}*"]
    lines += ["", row.content, ""]
    return "\n".join(lines)


# ---- import -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Imported:
    title: str
    configuration: str
    created_at: datetime | None
    messages: list[dict[str, Any]]
    """Message column values, in seq order, ready to store (no ids, no conversation)."""
    active_seq: int | None = None
    preset: str | None = None
    """The exported conversation's preset, by name: the importing user's preset of that
    name is used, if there is one; else it is dropped."""
    summaries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Summary column values (`Summary`), every branch's, ready to store."""


def _field(
    where: str, data: dict[str, Any], key: str, kinds: tuple[type, ...], *, null: bool
) -> Any:  # one of `kinds` (or None): the caller knows which it asked for
    value = data.get(key)
    if value is None:
        if null:
            return None
        raise InvalidInput(f"{where}.{key} is missing")
    if isinstance(value, bool) and bool not in kinds:
        raise InvalidInput(f"{where}.{key} must be {kinds[0].__name__}")
    if not isinstance(value, kinds):
        raise InvalidInput(f"{where}.{key} must be {kinds[0].__name__}")
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= INT_MAX:
        raise InvalidInput(f"{where}.{key} must be between 0 and {INT_MAX}")
    if isinstance(value, str):
        refuse_nul(value, f"{where}.{key}")
        limit = STRING_LIMITS.get(key, MAX_CONTENT)
        if len(value) > limit:
            raise InvalidInput(f"{where}.{key} is longer than {limit:,} characters")
    return value


def _time(where: str, data: dict[str, Any], key: str) -> datetime | None:
    value = _field(where, data, key, (str,), null=True)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{where}.{key} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise InvalidInput(f"{where}.{key} must name its time zone (e.g. end in Z)")
    # The instant, in UTC: what both databases keep of it (PostgreSQL's timestamptz holds
    # no offset; SQLite's column would drop the offset and keep the wall time).
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(
            f"{where}.{key} is out of range: in UTC it is not within the years 1 to 9999"
        ) from None


def _spans(where: str, value: object, seq: int) -> list[list[int]]:
    """The spans a user row at `seq` left out: within the seqs before it, merged into one
    span per left-out run (what the app stores), so a file cannot make the review and
    the chat walk a span for every copy of it."""
    if isinstance(value, list) and len(value) >= seq:
        raise InvalidInput(f"{where} holds more spans than there are messages before it")
    if not isinstance(value, list) or not all(
        isinstance(span, list)
        and len(span) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and 0 < n < seq for n in span)
        and span[0] <= span[1]
        for span in value
    ):
        raise InvalidInput(
            f"{where} must be a list of [first_seq, last_seq] pairs of seqs before {seq}"
        )
    merged: list[list[int]] = []
    for first, last in sorted(value):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def _share(where: str, data: dict[str, Any], key: str) -> float | None:
    """A share of the budget: a number in (0, 1], or null."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise InvalidInput(f"{where}.{key} must be a number above 0 and at most 1, or null")
    return float(value)


def _fit(where: str, fit: object, seq: int) -> dict[str, Any]:
    if not isinstance(fit, dict):
        raise InvalidInput(f"{where} must be an object or null")
    columns: dict[str, Any] = {}
    for key, column in FIT_COLUMNS.items():
        if key == "left_out":
            columns[column] = _spans(f"{where}.left_out", fit.get("left_out") or [], seq)
        elif key == "cleared":
            columns[column] = _cleared(f"{where}.cleared", fit.get("cleared"), seq)
        elif key in ("overflow_at_floor", "cut_moved"):
            columns[column] = _field(where, fit, key, (bool,), null=True)
        elif key == "trim_to":
            columns[column] = _share(where, fit, key)
        elif key in ("model", "counted_by"):
            columns[column] = _field(where, fit, key, (str,), null=True)
        else:
            columns[column] = _field(where, fit, key, (int,), null=True)
    return columns


def _cleared(where: str, value: object, seq: int) -> list[dict[str, int]] | None:
    """A fit's `cleared` spans: [{first_seq, last_seq, tokens}] of seqs before `seq`."""
    if value is None or value == []:
        return None
    if not isinstance(value, list) or len(value) >= seq:
        raise InvalidInput(f"{where} must be a list of spans of the messages before it")
    spans = []
    for span in value:
        if not isinstance(span, dict):
            raise InvalidInput(f"{where} must hold {{first_seq, last_seq, tokens}} objects")
        first = _field(where, span, "first_seq", (int,), null=False)
        last = _field(where, span, "last_seq", (int,), null=False)
        tokens = _field(where, span, "tokens", (int,), null=False)
        if not 0 < first <= last < seq:
            raise InvalidInput(f"{where} spans must be seqs before {seq}, first <= last")
        spans.append({"first_seq": first, "last_seq": last, "tokens": tokens})
    return spans


def _kind(role: str, data: dict[str, Any]) -> str:
    """What a row is in its turn: `user`, `answer`, or `step` (a tool call or result)."""
    if role == Role.USER:
        return "user"
    if role == Role.TOOL or data.get("tool_calls"):
        return "step"
    return "answer"


def _calls(where: str, value: object) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value or len(value) > MAX_TOOL_CALLS:
        raise InvalidInput(f"{where} must be a list of 1 to {MAX_TOOL_CALLS} calls")
    return [
        {key: _field(spot, call, key, (str,), null=False) for key in CALL_KEYS}
        for spot, call in _objects(where, value, " {id, name, arguments}")
    ]


def _objects(where: str, items: list[Any], shape: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Each item of a list that must hold objects, with the name an error gives it
    (`where[index]`); InvalidInput "... must be an object" + `shape` at the first that is not."""
    for index, item in enumerate(items):
        spot = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise InvalidInput(f"{spot} must be an object{shape}")
        yield spot, item


CALL_KEYS = ("id", "name", "arguments")


def _message(index: int, data: object, before: str | None) -> dict[str, Any]:
    """Row `index` of an import; `before` is the kind of the row before it (`_kind`;
    None for the first)."""
    where = f"messages[{index}]"
    if not isinstance(data, dict):
        raise InvalidInput(f"{where} must be an object")
    seq = index + 1
    if data.get("seq", seq) != seq:
        raise InvalidInput(f"{where}.seq must be {seq}: messages are numbered from 1, in order")
    role = _field(where, data, "role", (str,), null=False)
    if role not in {r.value for r in Role}:
        raise InvalidInput(f"{where}.role {role!r} is not one of {[r.value for r in Role]}")
    kind = _kind(role, data)
    status = _field(where, data, "status", (str,), null=True) or Status.COMPLETE.value
    statuses = TOOL_STATUSES if role == Role.TOOL else tuple(s.value for s in Status)
    if status not in statuses:
        raise InvalidInput(f"{where}.status {status!r} is not one of {list(statuses)}")
    if status == Status.STREAMING:
        status = Status.INTERRUPTED.value  # no one is writing it here
    parent = data.get("parent_seq", seq - 1 or None)
    continues = parent == (seq - 1 or None)
    # A question follows an answer or its tool steps; an answer follows its question;
    # tool steps follow the answer they belong to.
    allowed = {None: ("user",), "user": ("answer",), "answer": ("user", "step")}
    if continues and kind not in allowed.get(before, ("user", "step")):
        raise InvalidInput(
            f"{where}.role must follow the row before it: a question, its answer, then "
            "that answer's tool calls and results"
        )
    # The first turn of a branch continues an earlier answer (or its last tool step; or,
    # 0, the very start).
    starts_branch = (
        kind == "user"
        and isinstance(parent, int)
        and not isinstance(parent, bool)
        and (parent == 0 or 0 < parent < seq)
    )
    if not continues and not starts_branch:
        raise InvalidInput(
            f"{where}.parent_seq must be {seq - 1 or None}, or for a question that starts a "
            "branch, an earlier answer's seq (0: the very start)"
        )
    row: dict[str, Any] = {
        "seq": seq,
        "parent_seq": None if continues else parent,
        "role": role,
        "content": _field(where, data, "content", (str,), null=False),
        "status": status,
        "created_at": _time(where, data, "created_at"),
        "estimated_tokens": _field(where, data, "estimated_tokens", (int,), null=True),
        "pinned": role == Role.USER and bool(_field(where, data, "pinned", (bool,), null=True)),
        "model": _field(where, data, "model", (str,), null=True),
        "finish_reason": _field(where, data, "finish_reason", (str,), null=True),
        "error": _field(where, data, "error", (str,), null=True),
        "feedback": (
            feedback_value(_field(where, data, "feedback", (str,), null=True))
            if kind == "answer"
            else None
        ),
    }
    if kind == "step":
        if role == Role.TOOL:
            row["tool_call_id"] = _field(where, data, "tool_call_id", (str,), null=False)
            row["tool_name"] = _field(where, data, "name", (str,), null=False)
        else:
            row["tool_calls"] = _calls(f"{where}.tool_calls", data.get("tool_calls"))
    counts = data.get("token_counts") or {}
    if not isinstance(counts, dict):
        raise InvalidInput(f"{where}.token_counts must be an object")
    for name in counts:
        refuse_nul(name, f"{where}.token_counts: a tokenizer name")
        if len(name) > STRING_LIMITS["counted_by"]:
            raise InvalidInput(f"{where}.token_counts has a tokenizer name that is too long")
        _field(f"{where}.token_counts", counts, name, (int,), null=False)
    # Sizes are checked, never trusted: a forged one would steer the bound and what the
    # model's calibration learns. Re-estimated as the app estimates a stored message;
    # counted by the serving model's tokenizer on first use.
    row["estimated_tokens"] = (
        estimate_message(step_wire(row))
        if kind == "step"
        else estimate_message({"role": role, "content": row["content"]})
        if row["content"]
        else 0
    )
    row["token_counts"] = None
    usage = data.get("usage")
    if usage is not None:
        if not isinstance(usage, dict):
            raise InvalidInput(f"{where}.usage must be an object or null")
        row["prompt_tokens"] = _field(f"{where}.usage", usage, "prompt_tokens", (int,), null=True)
        row["completion_tokens"] = _field(
            f"{where}.usage", usage, "completion_tokens", (int,), null=True
        )
        for ledger in ("cached_tokens", "evaluated_tokens", "cache_write_tokens"):
            row[ledger] = _field(f"{where}.usage", usage, ledger, (int,), null=True)
    dropped = _field(where, data, "dropped_turns", (int,), null=True)
    if role == Role.USER and dropped is not None:
        row["dropped_turns"] = dropped
        row.update(_fit(f"{where}.fit", data.get("fit") or {}, seq))
    return row


def decode_export(raw: bytes) -> object:
    """A file's JSON, or a clear 400."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidInput("that file is not JSON: import a conversation's export") from None


def parse_export(data: object, *, default_configuration: str, known: set[str]) -> Imported:
    """A JSON export checked whole; an unknown configuration becomes the default one."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidInput(f'not a conversation export: "format" must be "{FORMAT}"')
    if data.get("version") != VERSION:
        raise InvalidInput(f"export version {data.get('version')!r} is not {VERSION}")
    conversation = data.get("conversation")
    messages = data.get("messages")
    if not isinstance(conversation, dict):
        raise InvalidInput('"conversation" must be an object')
    if not isinstance(messages, list):
        raise InvalidInput('"messages" must be a list')
    if len(messages) > MAX_MESSAGES:
        raise InvalidInput(f"an import holds at most {MAX_MESSAGES:,} messages")
    spans = sum(
        len(left_out)
        for message in messages
        if isinstance(message, dict)
        and isinstance(fit := message.get("fit"), dict)
        and isinstance(left_out := fit.get("left_out"), list)
    )
    if spans > MAX_LEFT_OUT_SPANS:
        raise InvalidInput(f"an import holds at most {MAX_LEFT_OUT_SPANS:,} left-out spans")
    kinds = [
        _kind(message.get("role", ""), message) if isinstance(message, dict) else ""
        for message in messages
    ]
    if kinds and kinds[-1] == "user":
        raise InvalidInput("the last message has no answer: an export ends with an answer")
    title = _field("conversation", conversation, "title", (str,), null=True)
    configuration = _field("conversation", conversation, "configuration", (str,), null=True)
    active = _field("conversation", conversation, "active_seq", (int,), null=True)
    preset = conversation.get("preset")  # an id in a conversation's JSON: no name, dropped
    rows = [
        _message(index, message, kinds[index - 1] if index else None)
        for index, message in enumerate(messages)
    ]
    starts = {row["parent_seq"] for row in rows if row["parent_seq"] is not None}
    if any(parent and kinds[parent - 1] == "user" for parent in starts):
        raise InvalidInput("a branch starts after an answer, never after a question")
    if active is not None:
        leaf = 2 <= active <= len(rows) and kinds[active - 1] != "user"
        if (
            not leaf
            or active in starts
            or (active < len(rows) and rows[active]["parent_seq"] is None)
        ):
            raise InvalidInput("conversation.active_seq must be the last answer of a branch")
    return Imported(
        title=title or "Imported conversation",
        configuration=configuration if configuration in known else default_configuration,
        created_at=_time("conversation", conversation, "created_at"),
        messages=rows,
        active_seq=active,
        preset=preset if isinstance(preset, str) else None,
        summaries=_summaries(data.get("summaries"), len(rows)),
    )


MAX_SUMMARIES = 10_000


def _summaries(value: object, messages: int) -> list[dict[str, Any]]:
    """The export's summaries (an export from before them has none), each checked: a
    version, the [first_seq, last_seq] it covers among the messages, its text."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_SUMMARIES:
        raise InvalidInput(f'"summaries" must be a list of at most {MAX_SUMMARIES:,} summaries')
    rows = []
    for where, data in _objects("summaries", value):
        version = _field(where, data, "version", (int,), null=False)
        covers = data.get("covers")
        if (
            isinstance(version, bool)
            or version < 1
            or not isinstance(covers, list)
            or len(covers) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in covers)
            or not 1 <= covers[0] <= covers[1] <= messages
        ):
            raise InvalidInput(
                f"{where} needs a version from 1 and covers [first_seq, last_seq] of its messages"
            )
        content = _field(where, data, "content", (str,), null=False)
        model = _field(where, data, "model", (str,), null=True)
        tokens = _field(where, data, "tokens", (int,), null=True)
        edited = _field(where, data, "edited", (bool,), null=True)
        fallback = _field(where, data, "fallback", (bool,), null=True)
        if not content or (model is not None and len(model) > 100):
            raise InvalidInput(
                f"{where} needs its text, and a model name of at most 100 characters"
            )
        rows.append(
            {
                "version": version,
                "first_seq": covers[0],
                "last_seq": covers[1],
                "content": content,
                "model": model,
                "tokens": max(0, tokens or 0),
                "edited": bool(edited),
                "fallback": bool(fallback),
                "created_at": _time(where, data, "created_at") or datetime.now(UTC),
            }
        )
    return rows
