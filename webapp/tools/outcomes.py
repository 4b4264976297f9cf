"""What a tool call came to, as the model and the transcript are given it.

A tool's output is untrusted text, sized by the server, not by us: it is capped at the
server's `max_result_tokens` (what is cut is said in the text, so the model knows it did
not see everything), and a call that could not run becomes a one-line stub the model is
told about, so the turn goes on instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from webapp.llm.estimator import estimate_text

Status = Literal["ok", "error", "failed", "timeout", "denied"]
"""ok: the tool answered; error: it answered that it failed; failed: the server could not
run it (did not start, crashed, unknown tool, bad arguments); timeout: it took longer than
the server's `timeout`; denied: the user did not allow it."""


@dataclass(frozen=True)
class ToolOutcome:
    """One call's result: `content` is what the model reads (capped, or a stub)."""

    content: str
    status: Status
    cut_tokens: int = 0
    """Tokens of the tool's output left out by the cap (0 when it fit)."""


def answered(blocks: list[Any], is_error: bool, cap: int) -> ToolOutcome:
    """A server's answer: its text blocks joined, any other block named by its type."""
    texts = []
    for block in blocks:
        text = getattr(block, "text", None)
        texts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    # NUL is no text (PostgreSQL refuses it in a text column): it is shown as a stand-in.
    content, cut = capped("\n".join(texts).replace("\x00", "\ufffd"), cap)
    return ToolOutcome(content, "error" if is_error else "ok", cut)


def stub(tool: str, status: Status, reason: str) -> ToolOutcome:
    """What the model reads when the call did not give a result."""
    said = {"failed": "could not be run", "timeout": "took too long and was stopped"}
    said |= {"denied": "was not allowed by the user", "error": "failed"}
    text = f"[tool {tool} {said.get(status, 'failed')}: {reason}. Tell the user if it matters.]"
    return ToolOutcome(text, status)


def capped(text: str, cap: int) -> tuple[str, int]:
    """`text` cut to at most `cap` tokens (by the estimate, which errs high) with a last
    line that says how much was cut; the cut's size is the second value."""
    total = estimate_text(text)
    if total <= cap:
        return text, 0
    note_room = 40  # the note below, with room to spare
    keep, room = text, max(cap - note_room, 0)
    while keep and (size := estimate_text(keep)) > room:
        keep = keep[: int(len(keep) * room / size * 0.9)]
    cut = total - estimate_text(keep)
    return f"{keep}\n[result cut: {cut} more tokens over this tool's cap of {cap}]", cut
