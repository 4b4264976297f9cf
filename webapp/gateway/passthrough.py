"""POST /v1/completions and /v1/embeddings: the caller's exact text, never pruned.

A completion whose prompt is larger than the budget is reported (`webapp.overflow`,
header `x-completion-overflow`) and sent all the same; embeddings are not bounded.
Both go down the configuration's route: a model that is down or rate-limited hands
over to the next, as in chat.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from litestar import Request, post
from litestar.types import ASGIApp

from webapp.chat.web.deps import Chat
from webapp.gateway.deps import Intakes, json_response, resolve_route
from webapp.gateway.errors import from_provider
from webapp.gateway.report import COMPLETION_OVERFLOW_HEADER, completion_report
from webapp.gateway.schemas import CompletionRequest, EmbeddingRequest
from webapp.gateway.streaming import whole_answer
from webapp.llm.catalog import ModelSpec
from webapp.llm.estimator import estimate_texts
from webapp.llm.manager import AllModelsFailed
from webapp.llm.providers.base import ProviderError
from webapp.llm.routing import Route
from webapp.web.deps import Owner

Result = TypeVar("Result")


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
    request: Request[Any, Any, Any], chat: Chat, intake: Intakes, owner: Owner
) -> ASGIApp:
    """A raw completion is the caller's exact text: never pruned; an overflow is reported
    (`webapp.overflow`, header `x-completion-overflow`) and the prompt sent all the same."""
    body, _ = await intake.read(request, owner, CompletionRequest)
    manager = chat.manager
    route = resolve_route(manager, body.model)
    prompt = body.text
    max_tokens = manager.max_tokens_for(route, body.max_tokens)
    (result, report), model = await _each_model(
        route,
        lambda model: manager.complete(model.name, prompt, max_tokens=max_tokens),
        "prompt",
    )
    webapp = completion_report(body.model, model, report)
    choice = {
        "text": result.text,
        "index": 0,
        "logprobs": None,
        "finish_reason": result.finish_reason,
    }
    return json_response(
        whole_answer("text_completion", model.name, choice, result.usage, webapp),
        {COMPLETION_OVERFLOW_HEADER: "true" if report is not None else "false"},
    )


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


@post("/embeddings", status_code=200)
async def embeddings(
    request: Request[Any, Any, Any], chat: Chat, intake: Intakes, owner: Owner
) -> ASGIApp:
    """Embeddings are not bounded: each input is the caller's to size. `usage` is this
    app's estimate, the pipeline does not carry the provider's count for embeddings."""
    body, _ = await intake.read(request, owner, EmbeddingRequest)
    manager = chat.manager
    route = resolve_route(manager, body.model)
    inputs = body.inputs
    vectors, model = await _each_model(
        route, lambda model: manager.embed(model.name, inputs), "input"
    )
    estimate = await estimate_texts(inputs)
    return json_response(
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
