"""What every HTTP provider shares, whatever its wire format: pooled clients, the read
timeout, and errors that name the endpoint without ever quoting the API key.

A subclass says how it authenticates (`_auth_headers`) and speaks its own format; the
pipeline only ever sees the error types of `base`, so the translation of transport
failures (connection refused, timeouts: `ProviderUnavailable`, a fallback may try) and
of a stream cut short (before any text: unavailable; after: `StreamBroken`) lives here,
once for every kind.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import email.utils
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self

import httpx
from httpx_sse import EventSource, ServerSentEvent

from webapp.llm.affinity import Affinity
from webapp.llm.providers.base import (
    CompletionResult,
    ImageRefused,
    Provider,
    ProviderError,
    ProviderUnavailable,
    StreamBroken,
    is_image_refusal,
)
from webapp.llm.providers.pool import ClientShards
from webapp.llm.providers.transport import TransportKind, transport_for

CONNECT_TIMEOUT = 5.0
"""Seconds to open a connection. Short: a dead host should hand over to a fallback quickly,
while `timeout` (the read timeout) has to cover a slow model's time to first token."""

_MAX_ERROR_TEXT = 500
"""Error bodies are cut to this many characters: an HTML error page is not a message."""


def count_of(value: Any) -> int | None:
    """A token count as the wire should carry it (an int, not negative), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def retry_after(headers: httpx.Headers, message: str) -> float | None:
    """Seconds to wait, from Retry-After (seconds or HTTP date), OpenAI's retry-after-ms,
    or failing those OpenAI's "Please try again in 6.5s" in the message."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                return max(0.0, when.timestamp() - time.time())
    match = re.search(r"try again in (?:(\d+)m)?(\d+(?:\.\d+)?)(ms|s)\b", message)
    if match:
        minutes, amount, unit = match.groups()
        seconds = float(amount) / (1000 if unit == "ms" else 1)
        return seconds + 60 * int(minutes or 0)
    return None


REST_TIMEOUT = 1.0
"""How long to wait for a stream's body to end after its [DONE]."""


async def read_rest(events: AsyncIterator[Any]) -> None:
    """Read what follows [DONE], the end of the body, so the connection goes back to the
    pool: a new connection per answer cost ~3 ms of CPU each at 200 streams. (A kept
    connection to a server that leaves Nagle on can hold the next response's first chunk
    until a delayed ACK, ~40 ms: our test upstream did, until its socket named TCP.)"""
    with contextlib.suppress(httpx.HTTPError, TimeoutError):
        async with asyncio.timeout(REST_TIMEOUT):
            async for _ in events:
                pass


# --------------------------------------------------------------------------------------
# The provider.
# --------------------------------------------------------------------------------------


def refusal(
    text: str,
    status: int | None,
    *,
    credentials: bool = False,
    unavailable: bool = False,
    shown: int | None = None,
) -> ProviderError:
    """A vendor's error once its own kinds (rate limits, context length) are read: every
    vendor's remaining failures fall in the same three outcomes, said the same way.

    Refused credentials (401/403, or `credentials`: the vendor's kind for them) fail the
    call; an outage (no status, a 5xx, or `unavailable`: the vendor's kind for one) lets
    a fallback try; a refusal of the images the request holds is `ImageRefused`; anything
    else is a refused request. `shown` is the status the
    credentials' reason names when the vendor sent none.
    """
    if credentials or status in (401, 403):
        shown = shown if shown is not None else status
        return ProviderError(
            text, status=status, reason=f"refused this app's credentials (HTTP {shown})"
        )
    if unavailable or status is None or status >= 500:
        reason = f"is unavailable (HTTP {status})" if status else "is unavailable"
        return ProviderUnavailable(text, status=status, reason=reason)
    if is_image_refusal(text):
        return ImageRefused(text, status=status)
    return ProviderError(text, status=status, reason=f"refused the request (HTTP {status})")


def tracing_sent(sent: Callable[[], None]) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """httpcore's trace hook (a request extension), reduced to the one event wanted: the
    request's body is written. Behind an https proxy the same hook also sees the CONNECT
    that opens the tunnel, which is not the request."""
    tunnelling = False

    async def trace(event: str, info: dict[str, Any]) -> None:
        nonlocal tunnelling
        if event.endswith(".send_request_headers.started"):
            tunnelling = getattr(info.get("request"), "method", b"") == b"CONNECT"
        elif event.endswith(".send_request_body.complete") and not tunnelling:
            sent()

    return trace


class HTTPProvider(Provider):
    """A provider spoken to over HTTP through pooled `httpx.AsyncClient`s (shards).

    `base_url` is where the endpoint paths are appended. `timeout` is the read timeout,
    i.e. the longest silence tolerated from the server (time to first token, or a gap
    inside a stream). `transport` exists for tests and unusual set-ups (a Unix socket, a
    mounted app); without it, `transport_kind` chooses (`transport_for`, or httpx's own).
    """

    CHAT_PATH = "chat/completions"
    """The chat endpoint, as error messages name it."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        transport_kind: TransportKind = "asyncio",
        affinity: Affinity | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._affinity = affinity or Affinity()
        self._api_key = api_key or None
        self._timeout = timeout
        url = httpx.URL(self.base_url)
        # Credentials in the URL would otherwise land in every error message.
        self._label = str(url.copy_with(username=None, password=None, query=None))
        headers = {"Accept": "application/json", **self._auth_headers()}
        tls = httpx.create_ssl_context()  # one for every shard: each costs milliseconds
        fast = transport is None and transport_kind == "asyncio"
        self._clients = ClientShards(
            lambda limits: httpx.AsyncClient(
                verify=tls,
                base_url=self.base_url + "/",
                headers=headers,
                timeout=httpx.Timeout(timeout, connect=min(CONNECT_TIMEOUT, timeout)),
                limits=limits,
                transport=transport
                or (transport_for(url, verify=tls, limits=limits) if fast else None),
            ),
            single=transport is not None,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._label!r})"

    def _auth_headers(self) -> dict[str, str]:
        """The headers that carry the key (none without one)."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._clients.aclose()

    def _where(self, path: str, model_id: str) -> str:
        return f"{self._label}/{path} (model {model_id!r})"

    def _clean(self, text: str) -> str:
        """Never let the API key into a message, whoever echoed it."""
        if self._api_key:
            text = text.replace(self._api_key, "[redacted]")
        return text

    def _snippet(self, text: str) -> str:
        text = self._clean(text.strip())
        return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "..."

    def _describe(self, exc: httpx.HTTPError) -> str:
        detail = str(exc) or type(exc).__name__
        return self._clean(f"{type(exc).__name__}: {detail}")

    def _transport_error(self, exc: httpx.HTTPError, path: str, model_id: str) -> ProviderError:
        where = self._where(path, model_id)
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
            return ProviderError(
                f"{where}: bad base_url: {self._describe(exc)}",
                reason="is misconfigured (its provider's address)",
            )
        if isinstance(exc, httpx.ConnectTimeout):
            reason = f"could not be reached within {min(CONNECT_TIMEOUT, self._timeout):g} s"
        elif isinstance(exc, httpx.PoolTimeout):
            reason = f"had no free connection within {self._timeout:g} s (too many calls at once)"
        elif isinstance(exc, httpx.TimeoutException):
            reason = f"did not answer within {self._timeout:g} s"
        elif isinstance(exc, httpx.ConnectError):
            return ProviderUnavailable(
                f"{where}: cannot connect ({self._describe(exc)})", reason="cannot be reached"
            )
        else:
            return ProviderUnavailable(
                f"{where}: connection failed ({self._describe(exc)})", reason="lost its connection"
            )
        return ProviderUnavailable(f"{where}: {reason}", reason=reason)

    def _cut_short(self, model_id: str, yielded: bool, reason: str) -> ProviderError:
        """Before any text: unavailable (fall back). After: the answer is partial."""
        where = self._where(self.CHAT_PATH, model_id)
        if yielded:
            return StreamBroken(
                f"{where}: stream broken after partial answer: {reason}",
                reason="broke off its answer part of the way",
            )
        return ProviderUnavailable(
            f"{where}: stream failed before any text: {reason}",
            reason="failed before sending any text",
        )

    def _status_error(self, response: httpx.Response, path: str, model_id: str) -> ProviderError:
        """An HTTP error status, read by the vendor's `_error_from_payload`."""
        try:
            payload: Any = response.json()
        except ValueError:
            payload = response.text
        return self._error_from_payload(
            response.status_code, payload, response.headers, path, model_id
        )

    @abc.abstractmethod
    def _error_from_payload(
        self, status: int | None, payload: Any, headers: httpx.Headers, path: str, model_id: str
    ) -> ProviderError:
        """The vendor's error body (of an error status, or inside a stream), read in its
        own shape as one of the error types of `base`."""

    def _answered(
        self, status: int | None, message: Any, path: str, model_id: str
    ) -> tuple[str, str]:
        """(the vendor's error message, cut and scrubbed; the log line naming the endpoint
        and quoting it, status first)."""
        text = self._snippet(message if isinstance(message, str) else json.dumps(message))
        text = text or (f"HTTP {status}" if status is not None else "unknown error")
        shown = f"HTTP {status}: {text}" if status is not None else text
        return text, f"{self._where(path, model_id)} answered {shown}"

    def _broke_off(
        self, path: str, model_id: str, message: str, status: int | None = None
    ) -> StreamBroken:
        """An error the vendor sent inside a stream after some text: the answer is partial."""
        return StreamBroken(
            f"{self._where(path, model_id)} broke off the stream: {self._clean(message)}",
            status=status,
            reason="broke off its answer part of the way",
        )

    def _event_stream(
        self, response: httpx.Response, path: str, model_id: str
    ) -> AsyncIterator[ServerSentEvent]:
        """The events of a stream, read by httpx-sse (it joins an event's data lines and
        drops comments, which servers send as keep-alives). A 200 that is not an event
        stream (a proxy's page) is refused up front, like a 200 whose JSON cannot be read,
        so the call is tried elsewhere."""
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type.partition(";")[0]:
            raise ProviderUnavailable(
                f"{self._where(path, model_id)} answered HTTP {response.status_code} with "
                f"{content_type or 'no content type'!r}, not an event stream",
                status=response.status_code,
                reason="sent an answer this app cannot read",
            )
        return EventSource(response).aiter_sse()

    async def _json_events(
        self, response: httpx.Response, path: str, model_id: str, yielded: Callable[[], bool]
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(event name, its data as an object) for every event that carries data; data
        that is not JSON cuts the stream short (`yielded` says whether text went out)."""
        async for event in self._event_stream(response, path, model_id):
            if not event.data:
                continue
            try:
                data = json.loads(event.data)
            except ValueError:
                raise self._cut_short(
                    model_id,
                    yielded(),
                    f"a stream event is not JSON: {self._snippet(event.data)!r}",
                ) from None
            if isinstance(data, dict):
                yield event.event, data

    async def _post_json(
        self, path: str, body: dict[str, Any], model_id: str, key: str | None = None
    ) -> dict[str, Any]:
        """A POST answered with JSON; `key` is the conversation's (its session header)."""
        try:
            async with self._clients.client() as client:
                response = await client.post(path, json=body, headers=self._affinity.headers(key))
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, path, model_id) from None
        if response.status_code >= 400:
            raise self._status_error(response, path, model_id)
        return self._json_body(response, path, model_id)

    @contextlib.asynccontextmanager
    async def _streamed(
        self,
        path: str,
        body: dict[str, Any],
        model_id: str,
        sent: Callable[[], None] | None,
        params: dict[str, str] | None = None,
        key: str | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """A streamed POST, open while the caller reads it; an error status is raised as
        the vendor's error, its body read. Transport errors are the caller's to translate
        (`_stream_broke`: before any text or after). `key` is the conversation's (its
        session header)."""
        async with (
            self._clients.client() as client,
            client.stream(
                "POST",
                path,
                params=params,
                json=body,
                headers={"Accept": "text/event-stream", **self._affinity.headers(key)},
                extensions={"trace": tracing_sent(sent)} if sent is not None else None,
            ) as response,
        ):
            if response.status_code >= 400:
                await response.aread()
                raise self._status_error(response, path, model_id)
            yield response

    def _json_body(self, response: httpx.Response, path: str, model_id: str) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            # A 200 that is not JSON is a proxy or a half-started server: try elsewhere.
            raise ProviderUnavailable(
                f"{self._where(path, model_id)} answered HTTP {response.status_code} "
                f"with a body that is not JSON: {self._snippet(response.text)!r}",
                status=response.status_code,
                reason="sent an answer this app cannot read",
            ) from None
        if not isinstance(data, dict):
            raise self._malformed(path, model_id, ValueError("the answer is not an object"))
        return data

    def _stream_broke(
        self, exc: httpx.HTTPError, path: str, model_id: str, yielded: bool
    ) -> ProviderError:
        """A stream the network broke: before any text a fallback may try, after some the
        answer was cut short."""
        if not yielded:
            return self._transport_error(exc, path, model_id)
        reason = (
            f"no data for {self._timeout:g} s"
            if isinstance(exc, httpx.TimeoutException)
            else self._describe(exc)
        )
        return self._cut_short(model_id, yielded, reason)

    def _malformed(self, path: str, model_id: str, exc: Exception) -> ProviderError:
        return ProviderError(
            f"{self._where(path, model_id)} sent an answer this client cannot read: {exc}",
            reason="sent an answer this app cannot read",
        )


class ChatOnlyProvider(HTTPProvider):
    """A vendor API with no raw completion (Anthropic's, Gemini's): a prompt to complete
    is sent as one user turn."""

    async def complete(
        self, model_id: str, prompt: str, *, max_tokens: int | None = None
    ) -> CompletionResult:
        answer = await self.chat(
            model_id, [{"role": "user", "content": prompt}], max_tokens=max_tokens
        )
        return CompletionResult(answer.content, answer.finish_reason, answer.usage)
