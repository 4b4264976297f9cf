"""The faults a test scripts (error statuses, broken streams, stalls) and the error bodies
the fake answers with, OpenAI's and vLLM's."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import JSONResponse, PlainTextResponse, Response


@dataclass
class _Failure:
    status: int
    count: int
    model: str | None
    retry_after: int | None


@dataclass
class _Break:
    n_chunks: int
    count: int


@dataclass
class _Stall:
    seconds: float
    count: int
    before_first_chunk: bool


_ERROR_BODIES: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request (simulated).", "invalid_request_error", None),
    401: ("Incorrect API key provided: {key}.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model (simulated).", "permission_error", None),
    404: ("Not found (simulated).", "invalid_request_error", None),
    429: ("Rate limit reached for requests (simulated).", "requests", "rate_limit_exceeded"),
    500: (
        "The server had an error while processing your request (simulated).",
        "server_error",
        None,
    ),
    502: ("Bad gateway (simulated).", "server_error", None),
    503: ("The server is overloaded or not ready yet (simulated).", "server_error", None),
}


def _error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _vllm_error(status: int, message: str, kind: str) -> JSONResponse:
    """vLLM's flat error body (not OpenAI's {"error": {...}})."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return JSONResponse(body, status_code=status)


def _not_found() -> Response:
    """What an engine answers for an endpoint it does not have (Starlette's own 404)."""
    return PlainTextResponse("Not Found", status_code=404)
