"""An answer that may call tools: the model's calls run through MCP, their results go
back, and the model is asked again, until it answers or the configuration's
`max_tool_steps` is reached (the last step offers no tools, so it must answer).

Each step is bounded again against the window (`LLMManager.plan` with the tools counted
in the head): the calls and results appended so far belong to the newest turn, which is
never left out, so a turn with tool calls goes whole or not at all. A call that cannot
give a result (unknown tool, server down, timeout) gives the model a stub that says so,
and the turn goes on. The loop yields what happens as it happens, for the answer's
channel and its rows.

A call to a server with `approval = "always"` runs only once `approve` says so (the
owner's Allow, `webapp.chat.answering.approvals`); a denial, or no decision in time, goes
back to the model as a stub that says the user declined it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from webapp.chat.answering.approvals import Decision
from webapp.llm.catalog import McpServerSpec
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import LLMManager, Plan
from webapp.llm.providers.base import ChatResult, Message
from webapp.llm.window import FitResult, Transcript, kept_from, split_turns
from webapp.tools.connections import McpConnections
from webapp.tools.outcomes import ToolOutcome, stub
from webapp.tools.toolset import Toolset


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model asked for a tool (the `tool_call` event; `arguments` as it sent them)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Calling:
    """A model step asked for tools: its text, its calls (one `ToolCall` event each
    follows), as the turn's assistant step is stored and replayed (`message`)."""

    result: ChatResult
    calls: list[ToolCall]
    model: str
    message: Message


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A call's outcome (the `tool_result` event)."""

    call: ToolCall
    outcome: ToolOutcome


@dataclass(frozen=True, slots=True)
class Stepped:
    """A model call was bounded and answered: its fit, and the model that served."""

    fit: FitResult
    model: str


@dataclass(frozen=True, slots=True)
class Answered:
    """The model's answer, after `steps` model calls; `appended` holds the assistant and
    tool messages of the turn's calls, in order, as they were sent."""

    result: ChatResult
    steps: int
    appended: list[Message]


ToolEvent = Stepped | Calling | ToolCall | ToolResult | Answered

Approve = Callable[[ToolCall, McpServerSpec], Awaitable[Decision]]
"""Asks the owner whether a call may run (its server wants approval) and waits for it."""

DECLINED = {
    "denied": "the user declined to run it",
    "expired": "the user did not allow it in time",
}


def calls_of(result: ChatResult) -> list[ToolCall]:
    """The model's calls, OpenAI-shaped whatever the provider (see `ChatResult`)."""
    calls = []
    for index, call in enumerate(result.tool_calls):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else _json(arguments)
        ident = str(call.get("id") or f"call_{index}")
        calls.append(ToolCall(ident, str(function.get("name") or ""), text))
    return calls


def _json(value: object) -> str:
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def extended(transcript: Transcript, messages: list[Message]) -> Transcript:
    """`transcript` with the turn's calls and results after it: not stored rows yet (no
    seq, no count), each estimated once as it is added."""
    more = len(messages)
    positions = transcript.positions
    if positions is not None:
        positions = dataclasses.replace(positions, seqs=positions.seqs + (None,) * more)
    return dataclasses.replace(
        transcript,
        messages=[*transcript.messages, *messages],
        estimates=[*transcript.sizes(), *(estimate_message(m) for m in messages)],
        counts={key: [*counts, *([None] * more)] for key, counts in transcript.counts.items()},
        ids=[*transcript.ids, *([None] * more)] if transcript.ids is not None else None,
        positions=positions,
    )


def carried(transcript: Transcript, fit: FitResult) -> Transcript:
    """`transcript` with the cut and the clearing `fit` made, for the turn's next step: a
    step is then the previous step's request plus what was appended, as a send is the
    previous send's (`webapp.llm.window`), unless it no longer fits."""
    cleared = max((index + 1 for index, _ in fit.cleared), default=0)
    keep_from = kept_from(fit.left_out)
    if not keep_from and transcript.omitted_turns:
        # Everything given was sent, but turns the loader did not read were not: the cut
        # stands right after the head.
        _, turns = split_turns(transcript.messages)
        keep_from = turns[1][0] if len(turns) > 1 else 0
    return dataclasses.replace(
        transcript,
        keep_from=keep_from,
        cleared_through=max(cleared, transcript.cleared_through),
    )


def assistant_message(result: ChatResult, calls: list[ToolCall]) -> Message:
    wire = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]
    return {"role": "assistant", "content": result.content or None, "tool_calls": wire}


def result_message(result: ToolResult) -> Message:
    call = result.call
    return {
        "role": "tool",
        "tool_call_id": call.id,
        "name": call.name,
        "content": result.outcome.content,
    }


async def run_tools(
    manager: LLMManager,
    plan: Plan,
    toolset: Toolset,
    connections: McpConnections,
    max_steps: int,
    approve: Approve | None = None,
) -> AsyncIterator[ToolEvent]:
    """The turn's model calls and tool calls, bounded at every step; ends with `Answered`.
    Without `approve`, a call that needs approval is declined (nobody to ask)."""
    appended: list[Message] = []
    history = plan.transcript
    for step in range(1, max_steps + 1):
        offered = toolset.tools if toolset and step < max_steps else None
        transcript = extended(history, appended)
        fit = (
            plan.fit
            if step == 1 and offered == plan.tools
            else _refit(manager, plan, transcript, offered)
        )
        step_plan = dataclasses.replace(plan, transcript=transcript, fit=fit, tools=offered)
        result, sent, model = await manager.chat(step_plan)
        yield Stepped(sent, model)
        if model == plan.route.primary.name:
            history = carried(history, sent)
        calls = calls_of(result)
        if not calls or offered is None:
            yield Answered(result, step, appended)
            return
        appended.append(assistant_message(result, calls))
        yield Calling(result, calls, model, appended[-1])
        for call in calls:
            yield call
        for call in calls:
            spec = toolset.servers.get(call.name)
            if spec is None:
                outcome = stub(call.name, "failed", "no tool of that name is offered")
            elif (refusal := await _refusal(call, spec, approve)) is not None:
                outcome = stub(call.name, "denied", refusal)
            else:
                outcome = await connections.call(spec, call.name, call.arguments)
            done = ToolResult(call, outcome)
            appended.append(result_message(done))
            yield done
    raise AssertionError("the last step offers no tools, so it answers")  # pragma: no cover


async def _refusal(call: ToolCall, spec: McpServerSpec, approve: Approve | None) -> str | None:
    """Why the call may not run: its server wants the owner's approval, not given."""
    if spec.approval != "always":
        return None
    decision = await approve(call, spec) if approve is not None else "denied"
    return None if decision == "allowed" else DECLINED[decision]


def _refit(
    manager: LLMManager, plan: Plan, transcript: Transcript, tools: list[dict[str, Any]] | None
) -> FitResult:
    return manager.fit_for(
        plan.route,
        plan.route.primary,
        transcript,
        caller=plan.caller,
        tools=tools,
        max_tokens=plan.max_tokens,
    )
