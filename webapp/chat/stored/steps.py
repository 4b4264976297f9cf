"""A turn's tool steps, stored as they happen (docs/design.md, tools).

The answer's row is written with the user's, when the send is stored; the model's tool
calls and their results come later, so they are appended after it, each step as soon as
it is known: an assistant row with the step's `tool_calls`, then one `tool` row per
result. A crash or a Stop keeps what was done, and the next send replays the turn in the
order it happened (`webapp.chat.stored.history`). Only one answer of a conversation is
written at a time (`webapp.chat.sending.admission`), so appending at the conversation's
next seq cannot interleave with another send's rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, func, insert, select
from sqlmodel import col

from webapp.chat.stored.models import MESSAGE_DEFAULTS, Message, Role
from webapp.db import as_loaded
from webapp.llm.providers.base import Message as WireMessage
from webapp.timeutil import utcnow


def step_wire(values: Mapping[str, Any]) -> WireMessage:
    """A step row (its column values) as the model is sent it, in the OpenAI shape the
    providers translate: a result answers its call by id; an assistant step carries its
    calls. Its stored estimate is this message's, so a send never re-estimates it."""
    if values["role"] == Role.TOOL:
        return {
            "role": "tool",
            "tool_call_id": values.get("tool_call_id") or "",
            "name": values.get("tool_name") or "",
            "content": values.get("content") or "",
        }
    calls = [
        {
            "id": call.get("id", ""),
            "type": "function",
            "function": {"name": call.get("name", ""), "arguments": call.get("arguments", "{}")},
        }
        for call in values.get("tool_calls") or ()
    ]
    return {"role": "assistant", "content": values.get("content") or None, "tool_calls": calls}


def turn_end(connection: Connection, conversation_id: str, answer_seq: int) -> int:
    """The seq of the last row of the turn whose answer is at `answer_seq`: its last tool
    step (they follow it without a gap), or the answer itself."""
    found = connection.execute(
        select(col(Message.seq), col(Message.role), col(Message.tool_calls))
        .where(
            col(Message.conversation_id) == conversation_id,
            col(Message.seq) > answer_seq,
            col(Message.seq) <= answer_seq + STEPS_READ,
        )
        .order_by(col(Message.seq))
    ).all()
    end = answer_seq
    for seq, role, calls in found:
        if seq != end + 1 or not (role == Role.TOOL or calls):
            break
        end = seq
    return end


STEPS_READ = 1024
"""The most step rows one turn is read with (a turn of `max_tool_steps` steps of many
calls each stays well under)."""


def append_rows(
    connection: Connection, conversation_id: str, rows: list[dict[str, Any]]
) -> list[Message]:
    """Store `rows` (column values) after the conversation's newest row, in order."""
    newest = connection.execute(
        select(func.max(col(Message.seq))).where(col(Message.conversation_id) == conversation_id)
    ).scalar()
    now = utcnow()
    stored = []
    for offset, values in enumerate(rows, start=1):
        row = {
            **MESSAGE_DEFAULTS,
            "conversation_id": conversation_id,
            "created_at": now,
            "updated_at": now,
            **values,
            "seq": (newest or 0) + offset,
        }
        found = connection.execute(insert(Message).values(row).returning(col(Message.id)))
        stored.append(as_loaded(Message, {**row, "id": found.scalar_one()}))
    return stored
