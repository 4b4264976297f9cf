"""Anthropic's Messages API: `/v1/messages` (whole or streamed as named events),
`/v1/messages/count_tokens` and the model records, each refusing as Anthropic does
(its error body, its key and version headers)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.upstream import _Abort, _EventStream, _pieces
from tests.vendors.anthropic_prompt import AnthropicPrompt
from tests.vendors.faults import _Fault, _Invalid
from tests.vendors.rules import ANTHROPIC_KEY, BLOCK_FRAME


class AnthropicAPI(AnthropicPrompt):
    """The Messages API's endpoints."""

    def _anthropic_error(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> JSONResponse:
        request_id = f"req_{self._next_id()}"
        body = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": request_id,
        }
        return JSONResponse(
            body, status_code=status, headers={"request-id": request_id, **(headers or {})}
        )

    def _anthropic_fault(self, fault: _Fault) -> JSONResponse:
        kinds = {
            400: ("invalid_request_error", "Invalid request (simulated)."),
            401: ("authentication_error", "invalid x-api-key"),
            403: (
                "permission_error",
                "Your API key does not have permission to use the specified resource.",
            ),
            404: ("not_found_error", "Not found (simulated)."),
            413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
            429: (
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit (simulated).",
            ),
            500: ("api_error", "Internal server error"),
            529: ("overloaded_error", "Overloaded"),
        }
        kind, message = kinds.get(fault.status, ("api_error", "Internal server error"))
        headers = {"retry-after": str(fault.retry_after)} if fault.retry_after is not None else {}
        return self._anthropic_error(fault.status, kind, message, headers)

    def _anthropic_auth(self, request: Request) -> JSONResponse | None:
        key = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        if key != ANTHROPIC_KEY:
            return self._anthropic_error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self._anthropic_error(
                400, "invalid_request_error", "anthropic-version: header is required"
            )
        return None

    def _anthropic_model_or_error(self, model: Any) -> tuple[int, int] | JSONResponse:
        with self._lock:
            limits = self._anthropic_limits.get(model) if isinstance(model, str) else None
        if limits is None:
            return self._anthropic_error(404, "not_found_error", f"model: {model}")
        return limits

    async def _anthropic_request(
        self, request: Request
    ) -> tuple[dict[str, Any], tuple[int, int]] | JSONResponse:
        """(the body, its model's limits), or the refusal of a bad key, body or model."""
        body = await self._record(request)
        refused = self._anthropic_auth(request)
        if refused is not None:
            return refused
        if not isinstance(body, dict):
            return self._anthropic_error(
                400, "invalid_request_error", "the body must be a JSON object"
            )
        limits = self._anthropic_model_or_error(body.get("model"))
        if isinstance(limits, JSONResponse):
            return limits
        return body, limits

    async def _count_tokens(self, request: Request) -> Response:
        accepted = await self._anthropic_request(request)
        if isinstance(accepted, JSONResponse):
            return accepted
        body, _ = accepted
        await self._count_slowly()
        try:
            blocks = self._anthropic_blocks(body)
        except _Invalid as exc:
            return self._anthropic_error(400, "invalid_request_error", str(exc))
        return JSONResponse({"input_tokens": blocks.total})

    def _anthropic_answer(
        self, body: dict[str, Any], model: str, max_tokens: int
    ) -> tuple[list[dict[str, Any]], int, str]:
        """(content blocks, output tokens, stop_reason)."""
        messages = body["messages"]
        last = messages[-1]
        content = last.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        calls_tool = (
            bool(body.get("tools"))
            and last.get("role") == "user"
            and all(b.get("type") == "text" for b in blocks)
        )
        if calls_tool:
            tool = body["tools"][0]
            schema = tool.get("input_schema") or {}
            samples = {"string": "echo", "integer": 1, "number": 1, "boolean": True, "array": []}
            arguments = {
                name: samples.get(
                    ((schema.get("properties") or {}).get(name) or {}).get("type", "")
                )
                for name in schema.get("required") or []
            }
            block = {
                "type": "tool_use",
                "id": f"toolu_{self._next_id()}",
                "name": tool["name"],
                "input": arguments,
            }
            return [block], self.count(json.dumps(arguments)) + BLOCK_FRAME, "tool_use"
        said = " ".join(
            b.get("text", "") if b.get("type") == "text" else json.dumps(b.get("content"))
            for b in blocks
        )
        text, tokens, cut = self._reply_text(model, len(messages), said, max_tokens)
        return [{"type": "text", "text": text}], tokens, "max_tokens" if cut else "end_turn"

    async def _messages(self, request: Request) -> Response:
        accepted = await self._anthropic_request(request)
        if isinstance(accepted, JSONResponse):
            return accepted
        body, (max_input, max_output) = accepted
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return self._anthropic_error(400, "invalid_request_error", "max_tokens: Field required")
        if max_tokens > max_output:
            return self._anthropic_error(
                400,
                "invalid_request_error",
                f"max_tokens: {max_tokens} > {max_output}, which is the maximum allowed "
                f"number of output tokens for {body['model']}",
            )
        try:
            blocks = self._anthropic_blocks(body)
        except _Invalid as exc:
            return self._anthropic_error(400, "invalid_request_error", str(exc))
        fault = self._take_fault()
        if fault is not None:
            return self._anthropic_fault(fault)
        model = str(body["model"])
        if blocks.total > max_input:
            return self._anthropic_error(
                400,
                "invalid_request_error",
                f"prompt is too long: {blocks.total} tokens > {max_input} maximum",
            )
        read, written = self._anthropic_cache(model, blocks)
        usage = {
            "input_tokens": blocks.total - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": 0,
            "service_tier": "standard",
        }
        content, output_tokens, stop_reason = self._anthropic_answer(body, model, max_tokens)
        message_id = f"msg_{self._next_id()}"
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": output_tokens},
                }
            )
        return _EventStream(
            self._paced(
                self._anthropic_stream(
                    message_id, model, content, usage, output_tokens, stop_reason
                )
            )
        )  # type: ignore[return-value]  # an ASGI app is a response

    async def _anthropic_stream(
        self,
        message_id: str,
        model: str,
        content: list[dict[str, Any]],
        usage: dict[str, Any],
        output_tokens: int,
        stop_reason: str,
    ) -> AsyncIterator[bytes]:
        def event(name: str, data: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

        fault = self._take_stream_fault()
        start: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        yield event("message_start", {"message": start})
        yield event("ping", {})
        sent = 0
        for index, block in enumerate(content):
            if block["type"] == "text":
                yield event(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
                pieces = _pieces(block["text"])
                kind, field_name = "text_delta", "text"
            else:
                opening = {**block, "input": {}}
                yield event("content_block_start", {"index": index, "content_block": opening})
                arguments = json.dumps(block["input"])
                pieces = [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]
                kind, field_name = "input_json_delta", "partial_json"
            for piece in pieces:
                if fault is not None and sent >= fault.after:
                    if fault.error:
                        yield event(
                            "error",
                            {"error": {"type": "overloaded_error", "message": "Overloaded"}},
                        )
                        return
                    raise _Abort
                yield event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": kind, field_name: piece}},
                )
                sent += 1
            yield event("content_block_stop", {"index": index})
        yield event(
            "message_delta",
            {
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
        yield event("message_stop", {})

    def _anthropic_record(self, model: str, limits: tuple[int, int]) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model,
            "display_name": model.replace("-", " ").title(),
            "created_at": "2026-05-14T00:00:00Z",
            "lifecycle": "active",
            "max_input_tokens": limits[0],
            "max_tokens": limits[1],
        }

    async def _anthropic_models(self, request: Request) -> Response:
        await self._record(request)
        refused = self._anthropic_auth(request)
        if refused is not None:
            return refused
        with self._lock:
            records = [
                self._anthropic_record(m, limits) for m, limits in self._anthropic_limits.items()
            ]
        return JSONResponse(
            {
                "data": records,
                "has_more": False,
                "first_id": records[0]["id"] if records else None,
                "last_id": records[-1]["id"] if records else None,
            }
        )

    async def _anthropic_model(self, request: Request) -> Response:
        await self._record(request)
        refused = self._anthropic_auth(request)
        if refused is not None:
            return refused
        model = request.path_params["rest"]
        limits = self._anthropic_model_or_error(model)
        if isinstance(limits, JSONResponse):
            return limits
        return JSONResponse(self._anthropic_record(model, limits))
