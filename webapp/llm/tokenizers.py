"""Counting a text's tokens with the tokenizer of the model that will read it.

The estimate (webapp.llm.estimator) errs high on purpose, because it must be safe for
any tokenizer; it was fitted to cl100k, and other families (Qwen, Llama, Gemma) split
text differently. When the model's own tokenizer is at hand, counts are exact and the
bound can use the whole window. Where a tokenizer comes from is the `tokenizer`
setting of each `[[models]]` entry (docs/design.md section 7):

- "estimate": the estimate, never exact;
- "tiktoken:<encoding>": an OpenAI encoding, loaded offline where a package ships it;
- "huggingface:<path>": a model's own tokenizer.json;
- "server": the serving engine's tokenize endpoint (llama.cpp, llama-cpp-python, vLLM);
- "auto" (default): the server's endpoint when one answers the start-up probe, else
  the estimate.

Counts are of content only (no chat template): the template's cost per message is
learned elsewhere from the usage the provider reports.

A tokenize endpoint is a network call in the send path, so it must never fail or stall
a send: every call is bounded by a short timeout, a failure raises TokenizerUnavailable
(the caller counts with the estimate instead), and after a failure the endpoint is left
alone for a while rather than costing every send another timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx

from webapp.llm import tokenizer_settings
from webapp.llm.catalog import Catalog, ModelSpec, ProviderSpec
from webapp.llm.engine import PROBE_TIMEOUT, auth_headers, engine_client, server_root
from webapp.llm.estimator import estimate_text
from webapp.llm.tokenizer_settings import TokenizerConfigError

log = logging.getLogger(__name__)

DOWN_FOR = 30.0
"""Seconds a tokenize endpoint is left alone after it failed, before it is tried again."""

CONCURRENCY = 8
"""Tokenize requests in flight at once per tokenizer: enough to count a history quickly,
few enough not to crowd out the engine's real work."""

PROBE_TEXT = "Hello, world! Counting tokens."
"""A short text every tokenizer splits into several tokens, so an answer of zero
tokens means the endpoint ignored the field it was sent."""

_THREAD_THRESHOLD = 20_000
"""Characters above which a local tokenizer runs in a thread, so a long text does not
block the event loop (both tiktoken and tokenizers release the GIL)."""


class TokenizerUnavailable(Exception):
    """Counting failed (HTTP error, timeout, unexpected body, or the endpoint is resting
    after a recent failure); the caller counts with the estimate instead."""


@runtime_checkable
class Tokenizer(Protocol):
    """Counts content tokens. `id` is what stored counts are keyed by, so two tokenizers
    with the same id must count alike; `exact` is False only for the estimate."""

    id: str
    exact: bool

    async def count(self, texts: Sequence[str]) -> list[int]:
        """Content tokens of each text, in order, without any chat template."""
        ...


# --------------------------------------------------------------------------- local


class EstimateTokenizer:
    """The estimate: always available, never exact, errs high."""

    id = "estimate"
    exact = False

    async def count(self, texts: Sequence[str]) -> list[int]:
        return [estimate_text(text) for text in texts]


async def _locally(encode_all: Callable[[list[str]], list[int]], texts: Sequence[str]) -> list[int]:
    batch = list(texts)
    if sum(len(text) for text in batch) > _THREAD_THRESHOLD:
        return await asyncio.to_thread(encode_all, batch)
    return encode_all(batch)


class TiktokenTokenizer:
    """An OpenAI encoding, read from a package's offline copy when there is one
    (`tokenizer_settings.tiktoken_encoding`); the id keeps the plain name, since the
    vocabulary is the same."""

    exact = True

    def __init__(self, encoding: str) -> None:
        load = tokenizer_settings.tiktoken_encoding(encoding)  # the package, the name
        import tiktoken

        try:
            self._encoding = tiktoken.get_encoding(load)
        except Exception as exc:  # tiktoken raises whatever its download raised
            raise TokenizerConfigError(
                f"tiktoken encoding '{encoding}' cannot be loaded (offline, only encodings "
                f"a package ships can be): {exc}"
            ) from exc
        self.id = f"tiktoken:{encoding}"

    def _encode_all(self, texts: list[str]) -> list[int]:
        # Special-token text in a message is ordinary text to us, as it is to the API.
        return [len(tokens) for tokens in self._encoding.encode_batch(texts, disallowed_special=())]

    async def count(self, texts: Sequence[str]) -> list[int]:
        return await _locally(self._encode_all, texts)


class HuggingFaceTokenizer:
    """A model's own tokenizer.json, through Hugging Face's `tokenizers` (an optional
    extra: `pip install 'webapp[huggingface]'`)."""

    exact = True

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        tokenizer_settings.require_package("huggingface")
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._tokenizer = HFTokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for a bad file
            raise TokenizerConfigError(f"cannot load tokenizer file {path}: {exc}") from exc
        self.id = f"huggingface:{path}"

    def _encode_all(self, texts: list[str]) -> list[int]:
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(encoding.ids) for encoding in encodings]

    async def count(self, texts: Sequence[str]) -> list[int]:
        return await _locally(self._encode_all, texts)


# --------------------------------------------------------------------------- server


@dataclass(frozen=True, slots=True)
class TokenizeShape:
    """One engine's tokenize endpoint: its path at the server root and its request body."""

    engine: str
    path: str
    body: Callable[[str, str], dict[str, Any]]
    """(text, model_id) -> the JSON body."""

    def __str__(self) -> str:
        return f"{self.engine} {self.path}"


VLLM = TokenizeShape(
    "vLLM",
    "/tokenize",
    # vLLM adds the model's BOS unless told not to; content counts exclude it.
    lambda text, model: {"model": model, "prompt": text, "add_special_tokens": False},
)
LLAMA_CPP = TokenizeShape("llama.cpp", "/tokenize", lambda text, model: {"content": text})
LLAMA_CPP_PYTHON = TokenizeShape(
    "llama-cpp-python", "/extras/tokenize", lambda text, model: {"input": text}
)
SHAPES: tuple[TokenizeShape, ...] = (VLLM, LLAMA_CPP, LLAMA_CPP_PYTHON)
"""Probe order. vLLM comes before llama.cpp because both answer at /tokenize: vLLM
refuses llama.cpp's body, but llama.cpp answers vLLM's with an empty token list."""


def _token_count(data: Any) -> int:
    """The count in a tokenize answer: vLLM's `count`, else the length of `tokens`."""
    if not isinstance(data, dict):
        raise ValueError("the answer is not a JSON object")
    count = data.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    tokens = data.get("tokens")
    if not isinstance(tokens, list):
        raise ValueError("the answer has no 'tokens' list")
    return len(tokens)


@dataclass(frozen=True, slots=True)
class EndpointLimits:
    """How long an HTTP tokenizer may take, how long it rests after a failure, and how
    many of its requests may be in flight: the same for every endpoint of a process."""

    timeout: float = PROBE_TIMEOUT
    down_for: float = DOWN_FOR
    concurrency: int = CONCURRENCY
    clock: Callable[[], float] = time.monotonic


class EndpointTokenizer:
    """A tokenizer that asks an HTTP endpoint, one request per text (`_one`), at most
    `limits.concurrency` of them in flight per endpoint, whoever asks.

    Every `count` is bounded by `limits.timeout` as a whole; a failure raises
    TokenizerUnavailable and rests the endpoint for `limits.down_for` seconds, during
    which `count` raises at once. A text that cannot be sent (a lone surrogate is no
    UTF-8) fails its count but says nothing of the endpoint. An engine's endpoint and a
    vendor's differ only in their request and in `where`, how errors name them.
    """

    exact = True

    def __init__(
        self, id: str, where: str, client: httpx.AsyncClient, limits: EndpointLimits
    ) -> None:
        self.id = id
        self.where = where
        self._client = client
        self.timeout = limits.timeout
        self.down_for = limits.down_for
        self._limit = asyncio.Semaphore(limits.concurrency)
        self._clock = limits.clock
        self._down_until = 0.0
        self.last_error: str | None = None

    @property
    def is_down(self) -> bool:
        return self._clock() < self._down_until

    async def count(self, texts: Sequence[str]) -> list[int]:
        if self.is_down:
            raise TokenizerUnavailable(
                f"{self.where} is resting after a failure: {self.last_error}"
            )
        try:
            # A task group, not gather: the first failure cancels the requests still
            # in flight instead of leaving them to load a server that is failing.
            async with asyncio.timeout(self.timeout), asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._limited(text)) for text in texts]
        except TimeoutError:
            raise self._failed(f"no answer within {self.timeout:g} s") from None
        except ExceptionGroup as failures:
            first = failures.exceptions[0]
            if isinstance(first, UnicodeError):  # the text cannot be sent, not the endpoint
                raise TokenizerUnavailable(f"cannot send the text: {first}") from first
            if not isinstance(first, httpx.HTTPError | ValueError):
                raise
            raise self._failed(str(first) or type(first).__name__) from first
        return [task.result() for task in tasks]

    async def _limited(self, text: str) -> int:
        async with self._limit:
            return await self._one(text)

    async def _one(self, text: str) -> int:
        raise NotImplementedError

    def _failed(self, reason: str) -> TokenizerUnavailable:
        self.last_error = reason
        self._down_until = self._clock() + self.down_for
        named = self.id if self.where == self.id else f"{self.id} ({self.where})"
        log.warning(
            "tokenizer %s failed: %s; counting with the estimate for %g s",
            named,
            reason,
            self.down_for,
        )
        return TokenizerUnavailable(f"{self.where}: {reason}")


class ServerTokenizer(EndpointTokenizer):
    """The engine's own tokenize endpoint, in the shape the start-up probe found."""

    def __init__(
        self,
        model: ModelSpec,
        provider: ProviderSpec,
        shape: TokenizeShape,
        client: httpx.AsyncClient,
        limits: EndpointLimits,
    ) -> None:
        assert provider.base_url is not None, "only openai providers have a server"
        self.shape = shape
        self.url = server_root(provider.base_url) + shape.path
        super().__init__(f"server:{model.name}", f"{shape} at {self.url}", client, limits)
        self._model_id = model.model_id
        self._headers = auth_headers(provider)

    async def _one(self, text: str) -> int:
        response = await self._client.post(
            self.url,
            json=self.shape.body(text, self._model_id),
            headers=self._headers,
            timeout=self.timeout,
        )
        if response.status_code != 200:
            raise ValueError(f"HTTP {response.status_code}: {response.text[:200]}")
        return _token_count(response.json())


async def probe_shape(
    client: httpx.AsyncClient,
    model: ModelSpec,
    provider: ProviderSpec,
    timeout: float = PROBE_TIMEOUT,
) -> tuple[TokenizeShape | None, str]:
    """The first endpoint shape that counts PROBE_TEXT as a positive number of tokens,
    and what was found; or None and why not ("no tokenize endpoint found at ...",
    "cannot connect to ...", ...), so check-config can tell a missing endpoint from a
    server that is down. Shapes are tried in order (they may share a path), all within
    `timeout`; nothing raises."""
    assert provider.base_url is not None
    root = server_root(provider.base_url)
    try:
        async with asyncio.timeout(timeout):
            return await _first_shape(client, model, provider, root, timeout)
    except TimeoutError:
        return None, f"no answer from {root} within {timeout:g} s"


async def _first_shape(
    client: httpx.AsyncClient,
    model: ModelSpec,
    provider: ProviderSpec,
    root: str,
    timeout: float,
) -> tuple[TokenizeShape | None, str]:
    headers = auth_headers(provider)
    refused: int | None = None
    for shape in SHAPES:
        try:
            response = await client.post(
                root + shape.path,
                json=shape.body(PROBE_TEXT, model.model_id),
                headers=headers,
                timeout=timeout,
            )
            if response.status_code == 200 and _token_count(response.json()) > 0:
                return shape, str(shape)
            if response.status_code in (401, 403):
                refused = response.status_code
        except httpx.TimeoutException:
            return None, f"no answer from {root} within {timeout:g} s"
        except httpx.TransportError as exc:
            # Nothing listens: no other path will do better.
            return None, f"cannot connect to {root} ({type(exc).__name__})"
        except (httpx.HTTPError, ValueError):
            continue
    if refused is not None:
        return None, f"{root} refused the key (HTTP {refused}): check api_key_env"
    return None, f"no tokenize endpoint found at {root}"


# --------------------------------------------------------------------------- vendors


def _vendor_count_request(
    model: ModelSpec, provider: ProviderSpec, text: str
) -> tuple[str, dict[str, Any], str]:
    """(url, body, the answer's count field) counting `text` as one user message."""
    assert provider.base_url is not None
    root = provider.base_url.rstrip("/")
    if provider.kind == "anthropic":
        body: dict[str, Any] = {
            "model": model.model_id,
            "messages": [{"role": "user", "content": text}],
        }
        return f"{root}/v1/messages/count_tokens", body, "input_tokens"
    name = model.model_id.removeprefix("models/")
    body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    return f"{root}/v1beta/models/{name}:countTokens", body, "totalTokens"


BASE_TEXT = "."
"""A one-token message: what a count-tokens call costs beyond its text is its count less one."""


class VendorTokenizer(EndpointTokenizer):
    """A native vendor's count-tokens endpoint (Anthropic `POST /v1/messages/count_tokens`,
    Gemini `:countTokens`). Each text is counted as a message of its own and the
    request's own cost (`base`, measured once by the probe) is taken off, so what is stored
    is the text's share; the template's cost per message is learned from usage as for
    every tokenizer."""

    def __init__(
        self,
        model: ModelSpec,
        provider: ProviderSpec,
        client: httpx.AsyncClient,
        base: int,
        limits: EndpointLimits,
    ) -> None:
        name = f"server:{model.name}"
        super().__init__(name, name, client, limits)
        self._model = model
        self._provider = provider
        self._headers = auth_headers(provider)
        self.base = base

    async def _one(self, text: str) -> int:
        if not text.strip():
            return 0  # the vendors refuse an empty message; it costs only its frame
        return max(
            0,
            await vendor_count(self._client, self._model, self._provider, text, self.timeout)
            - self.base,
        )


async def vendor_count(
    client: httpx.AsyncClient, model: ModelSpec, provider: ProviderSpec, text: str, timeout: float
) -> int:
    """What the vendor's count-tokens endpoint says of `text` as one user message."""
    url, body, field = _vendor_count_request(model, provider, text)
    response = await client.post(url, json=body, headers=auth_headers(provider), timeout=timeout)
    if response.status_code != 200:
        raise ValueError(f"HTTP {response.status_code}: {response.text[:200]}")
    data = response.json()
    count = data.get(field) if isinstance(data, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"the answer has no {field!r}")
    return count


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True, slots=True)
class _Resolved:
    tokenizer: Tokenizer
    how: str
    error: str | None = None


class Tokenizers:
    """Which tokenizer counts for each model, resolved once per process.

    At app start: ``tokenizers = Tokenizers(); await tokenizers.probe(catalog)``; then
    ``tokenizers.for_model(spec)`` in the send path (sync, no I/O) and
    ``await tokenizers.aclose()`` at shutdown. A model that was not probed (or a probe
    that never ran) counts with the estimate, so a send never depends on start-up order.
    """

    def __init__(
        self,
        *,
        timeout: float = PROBE_TIMEOUT,
        down_for: float = DOWN_FOR,
        concurrency: int = CONCURRENCY,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.timeout = timeout
        self.down_for = down_for
        self.concurrency = concurrency
        self._limits = EndpointLimits(timeout, down_for, concurrency)
        self._own_client = client is None
        self._client = client if client is not None else engine_client(timeout)
        self._resolved: dict[str, _Resolved] = {}
        self._estimate = EstimateTokenizer()

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Tokenizers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def errors(self) -> dict[str, str]:
        """Model name -> why its setting could not be honoured (it counts with the estimate)."""
        return {name: r.error for name, r in self._resolved.items() if r.error is not None}

    async def probe(self, catalog: Catalog) -> None:
        """Resolve every model's tokenizer; server endpoints are probed concurrently, each
        within the timeout. Never raises: a setting that cannot be honoured is logged,
        recorded in `errors`, and the model counts with the estimate."""
        jobs: list[Awaitable[tuple[str, _Resolved]]] = []
        for model in catalog.models.values():
            provider = catalog.providers[model.provider]
            jobs.append(self._resolve(model, provider))
        for name, resolved in await asyncio.gather(*jobs):
            self._resolved[name] = resolved
            if resolved.error is not None:
                log.error("model %s: tokenizer %s", name, resolved.error)

    def for_model(self, model: ModelSpec) -> Tokenizer:
        resolved = self._resolved.get(model.name)
        return resolved.tokenizer if resolved is not None else self._estimate

    def describe(self, model: ModelSpec) -> str:
        """How the model's tokenizer was resolved, for check-config and logs."""
        resolved = self._resolved.get(model.name)
        if resolved is None:
            return "estimate (not probed)"
        return resolved.how

    async def _resolve(self, model: ModelSpec, provider: ProviderSpec) -> tuple[str, _Resolved]:
        kind, argument = tokenizer_settings.split(model.tokenizer)
        estimate = self._estimate
        try:
            # Loading a vocabulary takes a moment: in a thread, so probes go on meanwhile.
            if kind == "tiktoken":
                local: Tokenizer = await asyncio.to_thread(TiktokenTokenizer, argument)
                return model.name, _Resolved(local, f"tiktoken {argument}")
            if kind == "huggingface":
                local = await asyncio.to_thread(HuggingFaceTokenizer, argument)
                return model.name, _Resolved(local, f"huggingface {argument}")
        except TokenizerConfigError as exc:
            return model.name, _Resolved(estimate, f"estimate (ERROR: {exc})", str(exc))
        if kind == "estimate":
            return model.name, _Resolved(estimate, "estimate (configured)")
        if provider.kind in ("anthropic", "gemini") and provider.base_url is not None:
            return model.name, await self._resolve_vendor(model, provider, kind)
        if provider.kind != "openai" or provider.base_url is None:
            return model.name, _Resolved(estimate, f"estimate ({provider.kind} provider)")
        shape, found = await probe_shape(self._client, model, provider, self.timeout)
        if shape is not None:
            tokenizer = ServerTokenizer(model, provider, shape, self._client, self._limits)
            return model.name, _Resolved(tokenizer, f"server ({shape})")
        if kind == "server":
            error = f"'server' but no tokenize endpoint answered: {found}"
            return model.name, _Resolved(estimate, f"estimate (ERROR: {error})", error)
        return model.name, _Resolved(estimate, f"estimate ({found})")

    async def _resolve_vendor(
        self, model: ModelSpec, provider: ProviderSpec, kind: str
    ) -> _Resolved:
        where = "count_tokens" if provider.kind == "anthropic" else ":countTokens"
        try:
            async with asyncio.timeout(self.timeout):
                base = (
                    await vendor_count(self._client, model, provider, BASE_TEXT, self.timeout) - 1
                )
        except (TimeoutError, httpx.HTTPError, ValueError) as exc:
            found = f"{provider.kind} {where} did not answer: {str(exc) or type(exc).__name__}"
            if kind == "server":
                error = f"'server' but {found}"
                return _Resolved(self._estimate, f"estimate (ERROR: {error})", error)
            return _Resolved(self._estimate, f"estimate ({found})")
        tokenizer = VendorTokenizer(model, provider, self._client, max(0, base), self._limits)
        return _Resolved(tokenizer, f"server ({provider.kind} {where})")
