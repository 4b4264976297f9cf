"""Chat calls that go into one of the caller's conversations (`x-conversation-id`).

Such a call is a send of the conversation service, exactly as the chat page makes
one: the conversation's stored history is the transcript. Only the request's last
message (a user message) is new; it is stored, the stored history before it is
fitted to the model that serves, and the answer is stored with its model and usage.
The request's earlier messages are not sent: the conversation already holds its
history, and fitting a transcript the conversation does not hold would store trim
facts that describe no stored turn. So the page shows the turn with its trim
marker, and `left_out` holds [first seq, last seq] spans of the stored messages.

What the service cannot honour is refused with a 400 naming the parameter, not
ignored: tools (a conversation stores no tool calls), max_tokens (the
configuration's applies), and a `model` other than the conversation's
configuration.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar.types import ASGIApp

from webapp.chat.answering.answer import Event
from webapp.chat.jobs import ChatJobs
from webapp.chat.send import Send
from webapp.chat.stored.models import Message, Status
from webapp.chat.stored.presets import Preset
from webapp.errors import NotFound
from webapp.gateway.deps import json_response
from webapp.gateway.errors import GatewayError, invalid
from webapp.gateway.report import DROPPED_TURNS_HEADER
from webapp.gateway.schemas import ChatCompletionRequest
from webapp.gateway.streaming import Chunks, completion_body, sse
from webapp.llm.providers.base import ChatResult, Usage
from webapp.stored import id_of
from webapp.web.events import EventStream

CONVERSATION_HEADER = "x-conversation-id"
FAILED = frozenset({Status.FAILED, Status.INTERRUPTED})


def _new_content(body: ChatCompletionRequest) -> str:
    if body.tools:
        raise invalid(f"tools cannot be used with {CONVERSATION_HEADER}", param="tools")
    if body.answer_limit is not None:
        raise invalid(
            f"max_tokens cannot be set with {CONVERSATION_HEADER}: the configuration's applies",
            param="max_tokens",
        )
    last = body.messages[-1]
    if last.role != "user":
        raise invalid(
            f"with {CONVERSATION_HEADER} the last message must be the user's new message",
            param="messages",
        )
    if isinstance(last.content, str):
        return last.content
    parts = last.content or []
    if any(part.type != "text" for part in parts):
        raise invalid("a conversation stores text messages only", param="messages")
    return "".join(part.text or "" for part in parts)


def _report(conversation_id: str, configuration: str, user: Message) -> dict[str, Any]:
    """The fit facts stored on the user row: what the send that was made sent."""
    return {
        "configuration": configuration,
        "conversation_id": conversation_id,
        "user_message_id": user.id,
        "model": user.fit_model,
        "window": user.fit_window,
        "budget": user.fit_budget,
        "reserve": user.fit_reserve,
        "estimated_tokens": user.fit_estimated_tokens,
        "dropped_turns": user.dropped_turns,
        "left_out": user.fit_left_out or [],
        "pins_left_out": user.fit_pins_dropped or 0,
        "overflow_at_floor": user.fit_overflow_at_floor,
        "counted_by": user.fit_counted_by,
        "trim_to": user.fit_trim_to,
        "cut_moved": bool(user.fit_cut_moved),
        "summary": user.fit_summary,
        "cached_tokens": None,
    }


def _usage_of(answer: Message) -> Usage | None:
    if answer.prompt_tokens is None:
        return None
    return Usage(answer.prompt_tokens, answer.completion_tokens or 0, answer.cached_tokens)


def _headers(user: Message) -> dict[str, str]:
    headers = {CONVERSATION_HEADER: user.conversation_id}
    if user.dropped_turns is not None:
        headers[DROPPED_TURNS_HEADER] = str(user.dropped_turns)
    return headers


def _failure(answer: Message, report: dict[str, Any]) -> GatewayError:
    """A failed answer is stored (the page shows it); the caller gets its error text."""
    return GatewayError(
        502,
        answer.error or "the answer failed",
        type="server_error",
        code="upstream_error",
        extra={"webapp": {**report, "assistant_message_id": answer.id}},
    )


async def _start(
    chat: ChatJobs,
    owner: str,
    conversation_id: str,
    body: ChatCompletionRequest,
    preset: Preset | None,
) -> Send:
    content = _new_content(body)
    try:
        conversation = await chat.reader.get(owner, conversation_id)
    except NotFound:
        raise GatewayError(
            404,
            "No such conversation.",
            param=CONVERSATION_HEADER,
            code="conversation_not_found",
        ) from None
    if preset is not None:
        if conversation.preset_id != preset.id:
            raise invalid(
                f"conversation {conversation_id} does not use preset {preset.name!r}",
                param="model",
            )
    elif conversation.configuration != body.model:
        raise invalid(
            f"conversation {conversation_id} uses configuration "
            f"{conversation.configuration!r}; send that as the model",
            param="model",
        )
    return await chat.sender.send(owner, conversation_id, content)


async def answer_in_conversation(
    chat: ChatJobs,
    owner: str,
    conversation_id: str,
    body: ChatCompletionRequest,
    *,
    preset: Preset | None = None,
) -> ASGIApp:
    """`preset`: the one the call's `model` named (`preset:<name>`), which the
    conversation must use; its send carries it as every send of the conversation does."""
    send = await _start(chat, owner, conversation_id, body, preset)
    if body.stream:
        return await _stream(chat, owner, send, body)
    user, answer = await chat.sender.settle(send)
    report = _report(conversation_id, body.model, user)
    if answer.status in FAILED:
        raise _failure(answer, report)
    report["cached_tokens"] = answer.cached_tokens
    result = ChatResult(answer.content, answer.finish_reason, _usage_of(answer))
    webapp = {**report, "assistant_message_id": answer.id}
    return json_response(completion_body(answer.model, result, webapp), _headers(user))


async def _stream(
    chat: ChatJobs, owner: str, send: Send, body: ChatCompletionRequest
) -> EventStream:
    """As the direct stream: opened at the first piece of the answer, once any fallback's
    re-fit is stored, so the headers and the first chunk carry the fit that was sent."""
    events = aiter(send.running.channel.follow())
    first: Event | None = None
    async for event in events:
        if event.name not in ("fit", "progress"):  # the answer's own events only
            first = event
            break
    user = await chat.reader.message(owner, send.conversation.id, id_of(send.user))
    report = _report(send.conversation.id, body.model, user)
    if first is not None and first.name == "error":
        answer = await chat.reader.message(owner, send.conversation.id, id_of(send.answer))
        raise _failure(answer, report)
    report["assistant_message_id"] = send.answer.id
    chunks = Chunks(user.fit_model or body.model, report, body.include_usage)
    return EventStream(_relay(chunks, first, events), headers=_headers(user))


async def _relay(
    chunks: Chunks, first: Event | None, events: AsyncIterator[Event]
) -> AsyncIterator[bytes]:
    """The answer's events as chunks. Leaving early stops nothing: the service finishes
    and stores the answer whoever is watching."""
    yield chunks.first()
    event = first
    while event is not None:
        if event.name == "delta":
            yield chunks.delta({"content": event.data["text"]})
        elif event.name == "done":
            done = event.data
            usage = done.get("usage") or None
            for data in chunks.last(
                done.get("finish_reason"),
                Usage(
                    usage["prompt_tokens"] or 0,
                    usage["completion_tokens"] or 0,
                    usage.get("cached_tokens"),
                )
                if usage
                else None,
            ):
                yield data
            return
        elif event.name == "error":
            error = GatewayError(
                502, event.data.get("message", "the answer failed"), type="server_error"
            )
            yield sse(error.body())
            return
        event = await anext(events, None)
