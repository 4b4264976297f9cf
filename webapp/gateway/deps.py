"""What every gateway endpoint takes besides the app's own dependencies: the rate limit
and the bounded intake of its body, the route its `model` names, and JSON answers with
headers."""

from __future__ import annotations

from typing import Any

from litestar import MediaType
from litestar.di import NamedDependency
from litestar.response.base import ASGIResponse
from litestar.serialization import encode_json

from webapp.gateway.cuts import StatelessCuts
from webapp.gateway.errors import GatewayError, model_not_found
from webapp.gateway.intake import Intake
from webapp.gateway.limits import RateLimit
from webapp.llm.manager import LLMManager
from webapp.llm.routing import Route, RoutingError

Limit = NamedDependency[RateLimit]
"""The gateway router's `limit` dependency: the chat's per-user rate limit."""
Cuts = NamedDependency[StatelessCuts]
"""The gateway router's `cuts` dependency: where stateless calls' cuts stay."""
Intakes = NamedDependency[Intake]
"""The gateway router's `intake` dependency: admission, then the body, bounded."""


def resolve_route(manager: LLMManager, name: str) -> Route:
    """The route of the configuration a call names as its `model`; an unknown name is
    OpenAI's 404 `model_not_found`."""
    if name not in manager.catalog.configurations:
        raise model_not_found(name)
    try:
        return manager.route(name)
    except RoutingError as error:
        raise GatewayError(
            503, f"{error}; ask the operator", type="server_error", code="no_model_available"
        ) from None


def json_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> ASGIResponse:
    """A JSON answer, as an ASGI app like the event streams (`webapp.web.events`): a
    handler that may answer either way returns `ASGIApp`."""
    return ASGIResponse(body=encode_json(body), media_type=MediaType.JSON, headers=headers)
