"""Errors in OpenAI's shape, so OpenAI clients raise their usual exception types.

Every failure under /v1 answers `{"error": {"message", "type", "param", "code"}}` with
the status OpenAI would use: the official client maps 400/401/404/429 to
BadRequestError, AuthenticationError, NotFoundError and RateLimitError, and agent
frameworks branch on those.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from webapp.errors import AppError, TooManyRequests
from webapp.llm.manager import AllModelsFailed
from webapp.llm.providers.base import (
    ContextLengthExceeded,
    ImageRefused,
    ProviderError,
    RateLimited,
)

log = logging.getLogger(__name__)

GATEWAY_PREFIX = "/v1/"


class GatewayError(Exception):
    """A refusal the gateway makes itself, already in OpenAI's vocabulary."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            },
            **self.extra,
        }

    def response(self) -> Response[Any]:
        return Response(
            self.body(),
            status_code=self.status_code,
            media_type=MediaType.JSON,
            headers=self.headers,
        )


def invalid(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def model_not_found(name: str) -> GatewayError:
    return GatewayError(
        404,
        f"The model {name!r} does not exist: use the name of a configuration (GET /v1/models).",
        param="model",
        code="model_not_found",
    )


def too_many(message: str, retry_after: int, code: str = "rate_limit_exceeded") -> GatewayError:
    """A 429 in OpenAI's shape, `Retry-After` in whole seconds: the gateway's own limits,
    or (`code="upstream_rate_limited"`) an upstream's passed on."""
    return GatewayError(
        429,
        message,
        type="rate_limit_error",
        code=code,
        headers={"Retry-After": str(retry_after)},
    )


def from_provider(error: ProviderError, model: str, param: str = "messages") -> GatewayError:
    """An upstream failure as the caller should see it: named by our model name, never by
    the provider's address (that goes to the log). A prompt the model refused as too long
    is the caller's to shorten, images a model does not read the caller's to leave out
    (400); a rate-limited upstream asks the caller to wait
    (429); anything else is the gateway's upstream failing (502/503)."""
    log.warning("gateway call failed: %s", error.message)
    public = error.public(model)
    if isinstance(error, ContextLengthExceeded):
        return GatewayError(400, public, param=param, code="context_length_exceeded")
    if isinstance(error, ImageRefused):
        return GatewayError(400, public, param=param, code="image_not_supported")
    retry_after = getattr(error, "retry_after", None)
    if isinstance(error, RateLimited) or (
        isinstance(error, AllModelsFailed) and error.status == 429
    ):
        wait = max(1, math.ceil(retry_after)) if retry_after else 1
        return too_many(public, wait, code="upstream_rate_limited")
    if error.retryable or isinstance(error, AllModelsFailed):
        return GatewayError(503, public, type="server_error", code="upstream_unavailable")
    return GatewayError(502, public, type="server_error", code="upstream_error")


def _validation_param(error: ValidationException) -> tuple[str, str | None]:
    items = [item for item in (error.extra or []) if isinstance(item, dict)]
    if not items:
        return str(error.detail), None
    first = items[0]
    key = first.get("key")
    return str(first.get("message", error.detail)), str(key) if key else None


def too_large(limit: int | None) -> GatewayError:
    size = f" of {limit:,} bytes" if limit else ""
    return GatewayError(
        413,
        f"The request body is larger than this gateway's limit{size} "
        "(WEBAPP_GATEWAY_MAX_BODY_BYTES).",
        code="request_too_large",
    )


def as_gateway_error(error: Exception) -> GatewayError:
    """Any exception raised while answering under /v1, in OpenAI's vocabulary."""
    if isinstance(error, GatewayError):
        return error
    if isinstance(error, RequestEntityTooLarge):
        return too_large(None)
    if isinstance(error, RecursionError):
        return invalid("The body of the request is nested too deeply.")
    if isinstance(error, UnicodeDecodeError):
        return invalid(f"The request is not valid UTF-8 (byte {error.start}).")
    if isinstance(error, TooManyRequests):
        return too_many(error.message, error.retry_after)
    if isinstance(error, AppError):
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return GatewayError(error.status_code, error.message, type=kind)
    if isinstance(error, NotAuthorizedException):
        return GatewayError(401, str(error.detail), code="invalid_api_key")
    if isinstance(error, PermissionDeniedException):
        return GatewayError(403, str(error.detail), type="permission_error")
    if isinstance(error, ValidationException):
        message, param = _validation_param(error)
        return GatewayError(400, message, param=param)
    if isinstance(error, NotFoundException):
        return GatewayError(404, "There is no such endpoint under /v1.", code="unknown_url")
    if isinstance(error, HTTPException):
        kind = "invalid_request_error" if error.status_code < 500 else "server_error"
        return GatewayError(error.status_code, str(error.detail), type=kind)
    log.error("gateway request failed", exc_info=error)
    return GatewayError(
        500, "The gateway failed because of an internal error.", type="server_error"
    )


def gateway_exception_handler(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    """Installed on the /v1 router (and consulted by the app for /v1 paths that match no
    route), so nothing under /v1 answers in another shape."""
    gateway_error = as_gateway_error(error)
    if isinstance(error, RequestEntityTooLarge):
        gateway_error = too_large(_body_limit(request))
    if isinstance(error, HTTPException) and error.headers:
        gateway_error.headers = {**error.headers, **gateway_error.headers}
    return gateway_error.response()


def _body_limit(request: Request[Any, Any, Any]) -> int | None:
    try:
        return request.route_handler.resolve_request_max_body_size()
    except Exception:  # no route matched: say no number rather than fail the answer
        return None
