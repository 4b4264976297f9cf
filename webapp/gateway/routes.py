"""The /v1 endpoints: models, chat completions, completions, embeddings.

Each call names a configuration as its `model`; the configuration's route (fixed
model or criteria, then fallbacks) decides which model serves. A chat call is
fitted by the pipeline against the model that serves it, before anything is sent
(for a stream: before its first chunk), and says what it left out in the
`x-dropped-turns` header and the answer's `webapp` object. A completion is sent
unpruned and an overflow reported; embeddings are passed through.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from litestar import MediaType, Request, Response, Router, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath
from litestar.response import Stream

from webapp.chat.service import ConversationService
from webapp.gateway.auth import BearerTokenAuth
from webapp.gateway.conversation import CONVERSATION_HEADER, answer_in_conversation
from webapp.gateway.errors import (
    GatewayError,
    from_provider,
    gateway_exception_handler,
    model_not_found,
)
from webapp.gateway.limits import RateLimit
from webapp.gateway.report import completion_report, fit_headers, fit_report
from webapp.gateway.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    parse,
)
from webapp.gateway.streaming import (
    STREAM_HEADERS,
    Chunks,
    completion_body,
    new_id,
    replay,
    sse,
    usage_dict,
)
from webapp.llm.catalog import ModelSpec
from webapp.llm.describe import configuration_dicts
from webapp.llm.estimator import estimate_text
from webapp.llm.manager import (
    AllModelsFailed,
    Counted,
    Delta,
    Finished,
    Fitted,
    LLMManager,
    Plan,
    StreamEvent,
    Transcript,
)
from webapp.llm.providers.base import ProviderError
from webapp.llm.routing import Route, RoutingError

Result = TypeVar("Result")
Chat = NamedDependency[ConversationService]
"""The app-wide `chat` dependency, declared as one (Litestar 3 stops inferring them)."""
Owner = NamedDependency[str]
Limit = NamedDependency[RateLimit]


def _route(manager: LLMManager, name: str) -> Route:
    if name not in manager.catalog.configurations:
        raise model_not_found(name)
    try:
        return manager.route(name)
    except RoutingError as error:
        raise GatewayError(
            503, f"{error}; ask the operator", type="server_error", code="no_model_available"
        ) from None


def _json(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(body, media_type=MediaType.JSON, headers=headers or {})


def _model_entry(described: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": described["name"],
        "object": "model",
        "created": 0,
        "owned_by": "webapp",
        "webapp": {
            "kind": described["kind"],
            "model": described["serving_model"],
            "window": described["window"],
            "fallbacks": described["fallbacks"],
            "max_tokens": described["max_tokens"],
        },
    }


@get("/models")
async def list_models(chat: Chat) -> dict[str, Any]:
    """The configurations, by name: what a call's `model` names."""
    described = configuration_dicts(chat.manager.catalog)
    return {"object": "list", "data": [_model_entry(entry) for entry in described]}


@get("/models/{name:str}")
async def read_model(chat: Chat, name: FromPath[str]) -> dict[str, Any]:
    for entry in configuration_dicts(chat.manager.catalog):
        if entry["name"] == name:
            return _model_entry(entry)
    raise model_not_found(name)


@post("/chat/completions", status_code=200)
async def chat_completions(
    request: Request[Any, Any, Any], chat: Chat, limit: Limit, owner: Owner
) -> Response[Any]:
    """A chat call, fitted to the model that serves it; with `x-conversation-id`, a send
    in one of the caller's conversations (see `webapp.gateway.conversation`)."""
    body: ChatCompletionRequest = parse(ChatCompletionRequest, await request.body())
    manager = chat.manager
    route = _route(manager, body.model)
    conversation_id = request.headers.get(CONVERSATION_HEADER)
    if conversation_id is not None:
        await limit.admit(owner, record=False)
        return await answer_in_conversation(chat, owner, conversation_id.strip(), body)
    await limit.admit(owner)
    messages = [message.wire() for message in body.messages]
    tools = body.wire_tools()
    plan = manager.plan(
        route, Transcript(messages=messages), tools=tools, max_tokens=body.answer_limit
    )
    if body.stream and not tools:
        return await _stream(manager, plan, body)
    try:
        answer, fit, model = await manager.chat(plan)
    except ProviderError as error:
        raise from_provider(error, plan.fit.model) from None
    report = fit_report(body.model, fit)
    if body.stream:
        chunks = Chunks(model, report, body.include_usage)
        return Stream(
            replay(chunks, answer),
            media_type="text/event-stream",
            headers={**STREAM_HEADERS, **fit_headers(fit)},
        )
    return _json(completion_body(model, answer, report), fit_headers(fit))


async def _stream(manager: LLMManager, plan: Plan, body: ChatCompletionRequest) -> Stream:
    """Wait for the first piece of the answer before opening the stream: until then a
    failure is still an HTTP error, and a fallback's re-fit is still news the headers
    can carry."""
    events = manager.stream(plan)
    fit = plan.fit
    try:
        first: StreamEvent | None = await anext(events, None)
        while isinstance(first, Fitted | Counted):
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
    return Stream(
        _relay(chunks, first, events),
        media_type="text/event-stream",
        headers={**STREAM_HEADERS, **fit_headers(fit)},
    )


async def _relay(
    chunks: Chunks, first: StreamEvent | None, events: AsyncIterator[StreamEvent]
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
        await events.aclose()  # type: ignore[attr-defined]
    for data in chunks.last(
        finished.finish_reason if finished else None, finished.usage if finished else None
    ):
        yield data


def _error_event(error: GatewayError) -> bytes:
    return sse(error.body())


async def _each_model(
    route: Route, call: Callable[[ModelSpec], Awaitable[Result]], param: str
) -> tuple[Result, ModelSpec]:
    """A call that is not a chat, tried on the route's models in order while they fail
    with a retryable error (down, rate-limited): fallbacks apply here as in chat."""
    failures: list[tuple[str, ProviderError]] = []
    for model in route.models:
        try:
            return await call(model), model
        except ProviderError as error:
            if not error.retryable:
                raise from_provider(error, model.name, param) from None
            failures.append((model.name, error))
    raise from_provider(AllModelsFailed(failures), route.primary.name, param)


@post("/completions", status_code=200)
async def completions(
    request: Request[Any, Any, Any], chat: Chat, limit: Limit, owner: Owner
) -> Response[Any]:
    """A raw completion is the caller's exact text: never pruned; an overflow is reported
    (`webapp.overflow`, header `x-completion-overflow`) and the prompt sent all the same."""
    body: CompletionRequest = parse(CompletionRequest, await request.body())
    manager = chat.manager
    route = _route(manager, body.model)
    prompt = body.text
    max_tokens = manager.max_tokens_for(route, body.max_tokens)
    await limit.admit(owner)
    (result, report), model = await _each_model(
        route,
        lambda model: manager.complete(model.name, prompt, max_tokens=max_tokens),
        "prompt",
    )
    webapp = completion_report(body.model, model, report)
    return _json(
        {
            "id": new_id("cmpl"),
            "object": "text_completion",
            "created": int(time.time()),
            "model": model.name,
            "choices": [
                {
                    "text": result.text,
                    "index": 0,
                    "logprobs": None,
                    "finish_reason": result.finish_reason,
                }
            ],
            "usage": usage_dict(result.usage),
            "webapp": webapp,
        },
        {"x-completion-overflow": "true" if report is not None else "false"},
    )


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


@post("/embeddings", status_code=200)
async def embeddings(
    request: Request[Any, Any, Any], chat: Chat, limit: Limit, owner: Owner
) -> Response[Any]:
    """Embeddings are not bounded: each input is the caller's to size. `usage` is this
    app's estimate, the pipeline does not carry the provider's count for embeddings."""
    body: EmbeddingRequest = parse(EmbeddingRequest, await request.body())
    manager = chat.manager
    route = _route(manager, body.model)
    inputs = body.inputs
    await limit.admit(owner)
    vectors, model = await _each_model(
        route, lambda model: manager.embed(model.name, inputs), "input"
    )
    estimate = sum(estimate_text(text) for text in inputs)
    return _json(
        {
            "object": "list",
            "data": [
                {
                    "object": "embedding",
                    "index": index,
                    "embedding": _encode(v, body.encoding_format),
                }
                for index, v in enumerate(vectors)
            ],
            "model": model.name,
            "usage": {"prompt_tokens": estimate, "total_tokens": estimate},
            "webapp": {"configuration": body.model, "model": model.name, "counted_by": "estimate"},
        }
    )


def gateway_router(chat: ConversationService) -> Router:
    """The /v1 router: bearer tokens only, OpenAI-shaped errors, the chat's rate limit."""
    settings = chat.settings
    limit = RateLimit(chat.sessions, settings.rate_limit_messages, settings.rate_limit_window)
    return Router(
        path="/v1",
        route_handlers=[list_models, read_model, chat_completions, completions, embeddings],
        middleware=[BearerTokenAuth],
        exception_handlers={Exception: gateway_exception_handler},
        dependencies={"limit": Provide(lambda: limit, sync_to_thread=False)},
        tags=["openai-compatible gateway"],
    )
