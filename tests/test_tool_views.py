"""An answer's tool calls as the page shows them (webapp/chat/web/tool_views.py and
templates/chat/_tool_calls.html): parts built from the stream's events, or from stored
steps folded into their answer; a tool's output is text (escaped, never a link), and the
Allow/Deny prompt shows only while the call waits on an answer being written."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

from webapp.chat.stored.models import Message, Status
from webapp.chat.web.tool_views import ToolParts, steps_of
from webapp.chat.web.views import MessageView, answer_view, message_views
from webapp.web.templates import render_fragment

MARKUP = '<script>alert("tool")</script><a href="javascript:alert(1)">https://x.example</a>'


def answer(status: Status = Status.STREAMING, seq: int = 2) -> Message:
    return Message(
        id=seq, conversation_id="c", seq=seq, role="assistant", content="", status=status
    )


def user(seq: int = 1) -> Message:
    return Message(id=seq, conversation_id="c", seq=seq, role="user", content="hi")


def rendered(view: MessageView) -> str:
    return render_fragment("chat/_message.html", message=view, base="/c/c", internals=True)


def parts_of(*events: tuple[str, dict[str, Any]]) -> ToolParts:
    parts = ToolParts()
    for name, data in events:
        parts.add(name, data)
    return parts


CALL = ("tool_call", {"id": "call_1", "name": "markup", "arguments": '{"a": 1}'})
WAITING = ("approval", {"id": "call_1", "name": "markup", "server": "s", "state": "waiting"})
ALLOWED = ("approval", {"id": "call_1", "name": "markup", "server": "s", "state": "allowed"})
RESULT = ("tool_result", {"id": "call_1", "name": "markup", "content": MARKUP, "status": "ok"})


def test_a_call_is_running_then_waits_then_has_its_result() -> None:
    parts = parts_of(CALL)
    (part,) = parts.parts
    assert (part.state, part.state_words) == ("running", "Running")
    assert part.arguments_text == '{\n  "a": 1\n}'
    parts.add(*WAITING)
    assert parts.parts[0].waiting and parts.parts[0].server == "s"
    parts.add(*ALLOWED)
    assert parts.parts[0].state == "running"
    assert parts.add(*RESULT)
    assert (parts.parts[0].state, parts.parts[0].result) == ("ok", MARKUP)
    assert not parts.add("tool_result", {"id": "call_unknown", "content": "x"})
    assert not parts.add("delta", {"text": "x"})


def test_a_tools_output_is_text_and_never_a_link() -> None:
    html = rendered(answer_view(answer(), user(), tools=parts_of(CALL, RESULT).parts))
    tools = html[html.index('class="tool-calls"') :]
    assert "<script" not in tools and "<a " not in tools
    assert "&lt;script&gt;" in tools and "javascript:alert(1)" in tools  # shown, inert
    assert 'data-state="ok"' in tools and "tool-approval" not in tools


def test_allow_and_deny_show_only_while_the_call_waits_on_a_streaming_answer() -> None:
    waiting = parts_of(CALL, WAITING).parts
    html = rendered(answer_view(answer(), user(), tools=waiting))
    buttons = re.findall(r"<button [^>]*aria-label=\"([^\"]+)\"[^>]*>(\w+)</button>", html)
    assert ("Allow markup", "Allow") in buttons and ("Deny markup", "Deny") in buttons
    assert 'hx-post="/c/c/tool-calls/call_1"' in html
    stopped = rendered(answer_view(answer(Status.STOPPED), user(), tools=waiting))
    assert "tool-approval" not in stopped and 'class="tool-call"' in stopped


@dataclass
class StepRow:
    """A stored step row in docs/design.md section 13's shape (the columns come with the tool
    store's migration): an assistant row with `tool_calls`, or a `tool` row."""

    role: str
    seq: int
    content: str = ""
    status: str = "complete"
    tool_calls: list[dict[str, str]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    id: int = field(default=0)
    attachments: None = None


def test_stored_steps_are_folded_into_their_answer() -> None:
    called = StepRow("assistant", 3, tool_calls=[{"id": "c1", "name": "echo", "arguments": "{}"}])
    result = StepRow("tool", 4, content=MARKUP, status="ok", tool_call_id="c1", tool_name="echo")
    rows = [user(1), answer(Status.COMPLETE, 2), called, result, user(5)]
    views = message_views(cast(list[Message], rows))
    assert [view.row.seq for view in views] == [1, 2, 5]
    (part,) = views[1].tools
    assert (part.id, part.name, part.state, part.result) == ("c1", "echo", "ok", MARKUP)
    assert steps_of(cast(list[Message], [called])) == (part.__class__("c1", "echo", "{}"),)
