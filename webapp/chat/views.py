"""Messages as the pages show them: rendered text, trim markers in words, status labels."""

from __future__ import annotations

import json
from dataclasses import dataclass

from markupsafe import Markup, escape

from webapp.chat.models import Message, Role, Status
from webapp.web.markdown import render_markdown

STATUS_LABELS = {
    Status.STREAMING: "Writing…",
    Status.STOPPED: "Stopped",
    Status.FAILED: "Failed",
    Status.INTERRUPTED: "Interrupted",
}


def plural(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


@dataclass(slots=True)
class MessageView:
    row: Message

    @property
    def left_out(self) -> list[list[int]]:
        """The [first, last] seq spans this send left out, as stored when it was sent."""
        return self.row.fit_left_out or []

    @property
    def left_out_json(self) -> str:
        return json.dumps(self.left_out, separators=(",", ":"))

    @property
    def is_user(self) -> bool:
        return self.row.role == Role.USER

    @property
    def html(self) -> Markup:
        if self.is_user:
            return escape(self.row.content)
        if self.row.content_html is not None and self.row.status != Status.STREAMING:
            return Markup(self.row.content_html)  # sanitized when it was stored
        return render_markdown(self.row.content)

    @property
    def trim_label(self) -> str | None:
        dropped = self.row.dropped_turns
        if not self.is_user or not dropped:
            return None
        were = "turn was" if dropped == 1 else "turns were"
        return f"{dropped:,} earlier {were} not sent to {self.row.fit_model}"

    @property
    def status_label(self) -> str | None:
        return STATUS_LABELS.get(Status(self.row.status))

    @property
    def fill_percent(self) -> int | None:
        row = self.row
        if not row.fit_window or row.fit_estimated_tokens is None:
            return None
        return min(100, round(100 * row.fit_estimated_tokens / row.fit_window))


def message_views(rows: list[Message]) -> list[MessageView]:
    return [MessageView(row) for row in rows]


def last_fit(rows: list[Message]) -> MessageView | None:
    """The newest user row whose fit was evaluated: what the context meter shows."""
    for row in reversed(rows):
        if row.role == Role.USER and row.dropped_turns is not None:
            return MessageView(row)
    return None
