"""An answer's tool calls as the page shows them: one part per call, that opens on its
tool's name, its arguments and then its result, and an Allow/Deny prompt while the call
waits for its owner.

Two sources give the same parts: the events of an answer being written in this process
(`tool_call`, `approval`, `tool_result`: `ToolParts`), and the rows of a turn stored with
its tool steps (an assistant row with `tool_calls`, then a `tool` row per result, stored
after the answer's row: `steps_of`). Everything a tool said is text, shown escaped by the
templates, never as HTML, and no address in it is a link.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from webapp.chat.stored.models import Message

STATE_WORDS = {
    "running": "Running",
    "waiting": "Waiting for your approval",
    "ok": "Done",
    "error": "The tool reported an error",
    "failed": "Could not run",
    "timeout": "Took too long",
    "denied": "Not allowed",
}
TOOL_ROLE = "tool"


@dataclass(frozen=True, slots=True)
class ToolPart:
    """One call: what the model asked, and what came of it so far."""

    id: str
    name: str
    arguments: str
    server: str | None = None
    approval: str | None = None
    """None (its server asks no approval), waiting, allowed, denied or expired."""
    result: str | None = None
    status: str | None = None
    """The outcome, once there is a result: ok, error, failed, timeout or denied."""

    @property
    def waiting(self) -> bool:
        return self.approval == "waiting" and self.status is None

    @property
    def state(self) -> str:
        if self.status is not None:
            return self.status
        return "waiting" if self.waiting else "running"

    @property
    def state_words(self) -> str:
        return STATE_WORDS.get(self.state, self.state)

    @property
    def arguments_text(self) -> str:
        """The arguments as the model sent them, indented when they are a JSON object."""
        try:
            parsed = json.loads(self.arguments or "{}")
        except ValueError:
            return self.arguments
        return json.dumps(parsed, indent=2, ensure_ascii=False)


class ToolParts:
    """The parts of an answer being written, from its channel's events, in call order."""

    def __init__(self) -> None:
        self._parts: dict[str, ToolPart] = {}

    def add(self, name: str, data: Mapping[str, Any]) -> bool:
        """Take one event into account; whether it changed a part."""
        ident = str(data.get("id", ""))
        if name == "tool_call":
            self._parts[ident] = ToolPart(
                ident, str(data.get("name", "")), str(data.get("arguments", ""))
            )
            return True
        part = self._parts.get(ident)
        if part is None:
            return False
        if name == "approval":
            server = data.get("server")
            self._parts[ident] = replace(
                part, approval=str(data.get("state")), server=str(server) if server else None
            )
            return True
        if name == "tool_result":
            content, status = data.get("content"), data.get("status")
            self._parts[ident] = replace(part, result=str(content or ""), status=str(status))
            return True
        return False

    @property
    def parts(self) -> tuple[ToolPart, ...]:
        return tuple(self._parts.values())


def is_step(row: Message) -> bool:
    """A stored row of a turn's tool calls: a result, or an assistant row that called."""
    return row.role == TOOL_ROLE or bool(getattr(row, "tool_calls", None))


def steps_of(rows: Iterable[Message]) -> tuple[ToolPart, ...]:
    """The parts of a turn's stored tool steps, in the order they happened."""
    parts: dict[str, ToolPart] = {}
    for row in rows:
        if row.role == TOOL_ROLE:
            ident = str(getattr(row, "tool_call_id", None) or "")
            name = str(getattr(row, "tool_name", None) or "")
            part = parts.get(ident) or ToolPart(ident, name, "")
            parts[ident] = replace(part, result=row.content, status=str(row.status))
            continue
        for call in getattr(row, "tool_calls", None) or ():
            ident = str(call.get("id", ""))
            parts[ident] = ToolPart(ident, str(call.get("name", "")), str(call.get("arguments")))
    return tuple(parts.values())
