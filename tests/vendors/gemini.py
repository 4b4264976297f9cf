"""Google's Gemini API: `:generateContent`, `:streamGenerateContent` (SSE, each event a
whole response), `:countTokens`, the embedding methods and the model records, each
refusing as Gemini does (its error body, its key in a header or the query)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.upstream import _Abort, _EventStream, _pieces
from tests.vendors.faults import _Fault, _Invalid
from tests.vendors.gemini_prompt import GeminiPrompt
from tests.vendors.rules import (
    BLOCK_FRAME,
    EMBEDDING_METHODS,
    EMBEDDING_MODELS,
    GEMINI_KEY,
    GENERATION_METHODS,
    REQUEST_BASE,
)


class GeminiAPI(GeminiPrompt):
    """The Gemini API's endpoints."""

    @staticmethod
    def _gemini_error(
        code: int, status: str, message: str, details: list[dict[str, Any]] | None = None
    ) -> JSONResponse:
        error: dict[str, Any] = {"code": code, "message": message, "status": status}
        if details:
            error["details"] = details
        return JSONResponse({"error": error}, status_code=code)

    def _gemini_fault(self, fault: _Fault) -> JSONResponse:
        statuses = {
            400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
            401: ("UNAUTHENTICATED", "API key not valid. Please pass a valid API key."),
            403: ("PERMISSION_DENIED", "Permission denied on resource project."),
            404: ("NOT_FOUND", "Requested entity was not found."),
            429: (
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota, please check your plan and billing details.",
            ),
            500: ("INTERNAL", "An internal error has occurred. Please retry or report."),
            503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
            504: ("DEADLINE_EXCEEDED", "The request timed out. Please try again."),
        }
        status, message = statuses.get(
            fault.status, ("INTERNAL", "An internal error has occurred.")
        )
        details = None
        if fault.status == 429 and fault.retry_after is not None:
            details = [
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": f"{fault.retry_after}s",
                }
            ]
        return self._gemini_error(fault.status, status, message, details)

    def _gemini_auth(self, request: Request) -> JSONResponse | None:
        key = request.headers.get("x-goog-api-key") or request.query_params.get("key")
        if key != GEMINI_KEY:
            return self._gemini_error(
                400 if key else 403,
                "INVALID_ARGUMENT" if key else "PERMISSION_DENIED",
                "API key not valid. Please pass a valid API key."
                if key
                else "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call "
                "this API.",
            )
        return None

    async def _gemini(self, request: Request) -> Response:
        body = await self._record(request)
        refused = self._gemini_auth(request)
        if refused is not None:
            return refused
        rest = request.path_params["rest"]
        model, _, method = rest.partition(":")
        with self._lock:
            limits = self._gemini_limits.get(model)
        if limits is None:
            return self._gemini_error(
                404,
                "NOT_FOUND",
                f"models/{model} is not found for API version v1beta, or is not supported for "
                "generateContent.",
            )
        if request.method == "GET":
            if method:
                return self._gemini_error(404, "NOT_FOUND", "Method not found.")
            return JSONResponse(self._gemini_record(model, limits))
        embeds = model in EMBEDDING_MODELS
        if method not in (EMBEDDING_METHODS if embeds else GENERATION_METHODS):
            return self._gemini_error(
                404,
                "NOT_FOUND",
                f"models/{model} is not found for API version v1beta, or is not supported "
                f"for {method}.",
            )
        if not isinstance(body, dict):
            return self._gemini_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        if embeds:
            try:
                return JSONResponse(self._gemini_embeddings(model, method, body, limits[0]))
            except _Invalid as exc:
                return self._gemini_error(400, "INVALID_ARGUMENT", str(exc))
        if method == "countTokens":
            await self._count_slowly()
            inner = (
                body.get("generateContentRequest") or body.get("generate_content_request") or body
            )
            try:
                runs = self._gemini_tokens(inner)
            except _Invalid as exc:
                return self._gemini_error(400, "INVALID_ARGUMENT", str(exc))
            total = REQUEST_BASE + sum(len(run) for run in runs)
            return JSONResponse(
                {
                    "totalTokens": total,
                    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}],
                }
            )
        config = body.get("generationConfig") or body.get("generation_config") or {}
        max_tokens = config.get("maxOutputTokens") or config.get("max_output_tokens") or limits[1]
        if not isinstance(max_tokens, int) or max_tokens > limits[1]:
            return self._gemini_error(
                400, "INVALID_ARGUMENT", f"The maxOutputTokens must be at most {limits[1]}."
            )
        try:
            runs = self._gemini_tokens(body)
        except _Invalid as exc:
            return self._gemini_error(400, "INVALID_ARGUMENT", str(exc))
        fault = self._take_fault()
        if fault is not None:
            return self._gemini_fault(fault)
        prompt = [token for run in runs for token in run]
        total = REQUEST_BASE + len(prompt)
        if total > limits[0]:
            return self._gemini_error(
                400,
                "INVALID_ARGUMENT",
                f"The input token count ({total}) exceeds the maximum number of tokens allowed "
                f"({limits[0]}).",
            )
        cached = self._gemini_cached(model, prompt)
        parts, output_tokens, finish = self._gemini_answer(body, model, max_tokens)
        usage: dict[str, Any] = {
            "promptTokenCount": total,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": total + output_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}],
        }
        if cached:
            usage["cachedContentTokenCount"] = cached
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        response_id = self._next_id()
        if method == "generateContent":
            return JSONResponse(self._gemini_response(model, response_id, parts, finish, usage))
        if request.query_params.get("alt") != "sse":
            # Without alt=sse Gemini streams one JSON array; clients are to ask for SSE.
            chunks = [self._gemini_response(model, response_id, parts, finish, usage)]
            return JSONResponse(chunks)
        return _EventStream(
            self._paced(self._gemini_stream(model, response_id, parts, finish, usage))
        )  # type: ignore[return-value]  # an ASGI app is a response

    def _gemini_answer(
        self, body: dict[str, Any], model: str, max_tokens: int
    ) -> tuple[list[dict[str, Any]], int, str]:
        contents = body["contents"]
        last = contents[-1]
        parts = last.get("parts") or []
        declarations = [
            d
            for tool in body.get("tools") or []
            for d in (tool.get("functionDeclarations") or tool.get("function_declarations") or [])
        ]
        if declarations and last.get("role", "user") == "user" and all("text" in p for p in parts):
            declaration = declarations[0]
            schema = (
                declaration.get("parameters")
                or declaration.get("parametersJsonSchema")
                or declaration.get("parameters_json_schema")  # as the SDK sends it
                or {}
            )
            samples = {
                "string": "echo",
                "STRING": "echo",
                "integer": 1,
                "INTEGER": 1,
                "number": 1,
                "boolean": True,
            }
            arguments = {
                name: samples.get(
                    ((schema.get("properties") or {}).get(name) or {}).get("type", "")
                )
                for name in schema.get("required") or []
            }
            call = {"functionCall": {"name": declaration["name"], "args": arguments}}
            return [call], self.count(json.dumps(arguments)) + BLOCK_FRAME, "STOP"
        said = " ".join(str(p.get("text", "")) if "text" in p else json.dumps(p) for p in parts)
        text, tokens, cut = self._reply_text(model, len(contents), said, max_tokens)
        return [{"text": text}], tokens, "MAX_TOKENS" if cut else "STOP"

    @staticmethod
    def _gemini_response(
        model: str,
        response_id: str,
        parts: list[dict[str, Any]],
        finish: str | None,
        usage: dict[str, Any],
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": response_id,
        }

    async def _gemini_stream(
        self,
        model: str,
        response_id: str,
        parts: list[dict[str, Any]],
        finish: str,
        usage: dict[str, Any],
    ) -> AsyncIterator[bytes]:
        def chunk(data: dict[str, Any]) -> bytes:
            return f"data: {json.dumps(data)}\r\n\r\n".encode()

        fault = self._take_stream_fault()
        if "text" not in parts[0]:
            yield chunk(self._gemini_response(model, response_id, parts, finish, usage))
            return
        pieces = _pieces(parts[0]["text"])
        running = {k: v for k, v in usage.items() if k != "candidatesTokenCount"}
        for number, piece in enumerate(pieces):
            if fault is not None and number >= fault.after:
                if fault.error:
                    error = {
                        "error": {
                            "code": 503,
                            "message": "The model is overloaded. Please try again later.",
                            "status": "UNAVAILABLE",
                        }
                    }
                    yield chunk(error)
                    return
                raise _Abort
            last = number == len(pieces) - 1
            yield chunk(
                self._gemini_response(
                    model,
                    response_id,
                    [{"text": piece}],
                    finish if last else None,
                    usage if last else running,
                )
            )

    @staticmethod
    def _gemini_record(model: str, limits: tuple[int, int]) -> dict[str, Any]:
        return {
            "name": f"models/{model}",
            "baseModelId": model,
            "version": "001",
            "displayName": model.replace("-", " ").title(),
            "description": "A fake Gemini model for tests.",
            "inputTokenLimit": limits[0],
            "outputTokenLimit": limits[1],
            "supportedGenerationMethods": list(
                EMBEDDING_METHODS if model in EMBEDDING_MODELS else GENERATION_METHODS
            ),
            "temperature": 1.0,
            "topP": 0.95,
            "topK": 64,
        }

    async def _gemini_models(self, request: Request) -> Response:
        await self._record(request)
        refused = self._gemini_auth(request)
        if refused is not None:
            return refused
        with self._lock:
            models = [self._gemini_record(m, limits) for m, limits in self._gemini_limits.items()]
        return JSONResponse({"models": models})
