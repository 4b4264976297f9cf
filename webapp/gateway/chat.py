"""POST /v1/chat/completions: chat and tool calls, bounded against the serving model.

The pipeline fits the request's messages to the model that will serve (tool schemas
and the answer's room counted), falls back and re-fits as it must, and the answer
says what was left out in `x-dropped-turns` and its `webapp` object. A stream is
opened only once the first piece of the answer is there, so its headers and first
chunk carry the fit that was actually sent.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from litestar import Request, post
from litestar.types import ASGIApp

from webapp.chat.files.service import MAX_IMAGE_PIXELS
from webapp.chat.sending.files import route_for_pictures
from webapp.chat.web.deps import Chat
from webapp.errors import InvalidInput
from webapp.gateway.conversation import CONVERSATION_HEADER, answer_in_conversation
from webapp.gateway.deps import Cuts, Intakes, json_response
from webapp.gateway.errors import GatewayError, from_provider
from webapp.gateway.intake import estimates
from webapp.gateway.pictures import ready_pictures, with_picture_estimates
from webapp.gateway.presets import addressed, with_preset_prompt
from webapp.gateway.report import fit_headers, fit_report
from webapp.gateway.schemas import ChatCompletionRequest
from webapp.gateway.streaming import Chunks, completion_body, replay, sse
from webapp.llm.catalog import Catalog
from webapp.llm.manager import (
    Counted,
    Delta,
    Finished,
    Fitted,
    LLMManager,
    Plan,
    Prefilling,
    StreamEvent,
)
from webapp.llm.providers.base import Message, ProviderError
from webapp.llm.routing import Route
from webapp.llm.window import FitResult, Transcript
from webapp.web.deps import Owner
from webapp.web.events import EventStream


@post("/chat/completions", status_code=200)
async def chat_completions(
    request: Request[Any, Any, Any], chat: Chat, intake: Intakes, cuts: Cuts, owner: Owner
) -> ASGIApp:
    """A chat call, fitted to the model that serves it; with `x-conversation-id`, a send
    in one of the caller's conversations (see `webapp.gateway.conversation`). Admitted
    before its body is read (`webapp.gateway.intake`)."""
    conversation_id = request.headers.get(CONVERSATION_HEADER)
    body, size = await intake.read(
        request, owner, ChatCompletionRequest, record=conversation_id is None
    )
    manager = chat.manager
    found = await addressed(chat, owner, body.model)
    preset = found.preset
    if conversation_id is not None:
        return await answer_in_conversation(
            chat, owner, conversation_id.strip(), body, preset=preset
        )
    messages = with_preset_prompt([message.wire() for message in body.messages], preset)
    route = found.route
    route = seeing(manager.catalog, route, messages)
    messages, sizes = await ready_pictures(
        manager.catalog, route, messages, chat.settings.file_read_seconds, MAX_IMAGE_PIXELS
    )
    tools = body.wire_tools()
    keep_from = cuts.keep_from(owner, body.model, route.primary.name, messages)
    sized = with_picture_estimates(
        manager.catalog, route, messages, await estimates(messages, size), sizes
    )
    plan = manager.plan(
        route,
        Transcript(messages=messages, estimates=sized, keep_from=keep_from),
        caller=owner,
        tools=tools,
        max_tokens=body.answer_limit or (preset.max_tokens if preset else None),
        temperature=preset.temperature if preset else None,
        cache_scope=f"gateway:{owner}:{body.cache_scope}" if body.cache_scope else None,
    )
    if body.stream and not tools:
        response, fit = await _stream(manager, plan, body)
        cuts.remember(owner, body.model, messages, fit)
        return response
    try:
        answer, fit, model = await manager.chat(plan)
    except ProviderError as error:
        raise from_provider(error, plan.fit.model) from None
    cuts.remember(owner, body.model, messages, fit)
    report = fit_report(body.model, fit, answer.usage)
    if body.stream:
        chunks = Chunks(model, report, body.include_usage)
        return EventStream(replay(chunks, answer), headers=fit_headers(fit))
    return json_response(completion_body(model, answer, report), fit_headers(fit))


async def _stream(
    manager: LLMManager, plan: Plan, body: ChatCompletionRequest
) -> tuple[EventStream, FitResult]:
    """Wait for the first piece of the answer before opening the stream: until then a
    failure is still an HTTP error, and a fallback's re-fit is still news the headers
    can carry."""
    events = manager.stream(plan)
    fit = plan.fit
    try:
        first: StreamEvent | None = await anext(events, None)
        while isinstance(first, Fitted | Counted | Prefilling):
            if isinstance(first, Fitted):
                fit = first.fit
            first = await anext(events, None)
    except ProviderError as error:
        await events.aclose()
        raise from_provider(error, fit.model) from None
    except BaseException:
        await events.aclose()
        raise
    chunks = Chunks(fit.model, fit_report(body.model, fit), body.include_usage)
    stream = EventStream(_relay(chunks, first, events), headers=fit_headers(fit))
    return stream, fit


async def _relay(
    chunks: Chunks, first: StreamEvent | None, events: AsyncGenerator[StreamEvent, None]
) -> AsyncIterator[bytes]:
    finished: Finished | None = None
    try:
        yield chunks.first()
        event = first
        while event is not None:
            if isinstance(event, Delta):
                yield chunks.delta({"content": event.text})
            elif isinstance(event, Finished):
                finished = event
            event = await anext(events, None)
    except ProviderError as error:
        yield _error_event(from_provider(error, chunks.model))
        return
    finally:
        await events.aclose()
    for data in chunks.last(
        finished.finish_reason if finished else None, finished.usage if finished else None
    ):
        yield data


def seeing(catalog: Catalog, route: Route, messages: list[Message]) -> Route:
    """With a picture in the prompt, only the route's models that see; OpenAI's 400 when
    the first cannot (`sending.files.route_for_pictures`, the chat's rule)."""
    if not any(part_types(m) & {"image_url"} for m in messages):
        return route
    try:
        return route_for_pictures(catalog, route)
    except InvalidInput as refused:
        raise GatewayError(
            400, refused.message, param="messages", code="image_not_supported"
        ) from None


def part_types(message: Message) -> set[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return set()
    return {str(part.get("type")) for part in content if isinstance(part, dict)}


def _error_event(error: GatewayError) -> bytes:
    return sse(error.body())
