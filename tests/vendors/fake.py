"""The fake vendors: both APIs on one server, at the paths the vendors use."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tests.vendors.anthropic import AnthropicAPI
from tests.vendors.gemini import GeminiAPI
from tests.vendors.rules import REQUEST_BASE


class FakeVendors(AnthropicAPI, GeminiAPI):
    """Anthropic's and Gemini's APIs on 127.0.0.1 with scriptable faults. Control methods
    are thread-safe: tests call them from their own thread while the server runs in its own."""

    def _routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
            # Gemini serves /v1 and /v1beta alike (its SDK now defaults to /v1), so
            # /v1/models is Anthropic's or Gemini's by the key's header.
            Route("/v1/models", self._either_models, methods=["GET"]),
            Route("/v1/models/{rest:path}", self._either_model, methods=["GET", "POST"]),
            Route("/v1beta/models", self._gemini_models, methods=["GET"]),
            Route("/v1beta/models/{rest:path}", self._gemini, methods=["GET", "POST"]),
        ]

    def prompt_tokens(self, request: dict[str, Any]) -> int:
        """What the vendor bills as the prompt of a recorded generation request (one of
        `requests`): the same count its count-tokens endpoint gives."""
        body = request["body"]
        if request["path"] == "/v1/messages":
            return self._anthropic_blocks(body).total
        return REQUEST_BASE + sum(len(run) for run in self._gemini_tokens(body))

    @staticmethod
    def _is_gemini(request: Request) -> bool:
        return "x-goog-api-key" in request.headers or "key" in request.query_params

    async def _either_models(self, request: Request) -> Response:
        if self._is_gemini(request):
            return await self._gemini_models(request)
        return await self._anthropic_models(request)

    async def _either_model(self, request: Request) -> Response:
        if self._is_gemini(request) or request.method == "POST":
            return await self._gemini(request)
        return await self._anthropic_model(request)
