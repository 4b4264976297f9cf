"""Context windows discovered from the serving engine (docs/design.md section 7).

A `[[models]]` entry may leave `context_window` out: the engine knows what it was
started with, and a window copied into the catalog goes stale the day someone restarts
the engine with another `--ctx-size`. Each engine says it differently:

- vLLM: `GET <base_url>/models` -> `data[i].max_model_len` (the entry whose id is the
  model_id);
- LM Studio: `GET /api/v0/models` -> `data[i].loaded_context_length` (what it was
  loaded with), else `max_context_length`;
- llama.cpp: `GET /props` -> `default_generation_settings.n_ctx`;
- Ollama: `POST /api/show {"model"}` -> the `num_ctx` line of `parameters` when set (what
  a request really gets), else `model_info["<arch>.context_length"]`.

Endpoints other than `/models` live at the server root. A window neither configured nor
discoverable is DEFAULT_WINDOW, with a warning; a configured window larger than the
server's is kept (the file says so) but reported. Discovery runs once per process (the
results are cached; a restart discovers again), concurrently and under a short
timeout, and never raises: at worst every model gets the default.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from webapp.llm.catalog import DEFAULT_WINDOW, Catalog, ModelSpec, ProviderSpec
from webapp.llm.engine import PROBE_TIMEOUT, auth_headers, engine_client, server_root

log = logging.getLogger(__name__)

NOT_DISCOVERABLE = f"default {DEFAULT_WINDOW}: not configured and not discoverable"


@dataclass(frozen=True, slots=True)
class WindowSource:
    """Where a model's window came from, for check-config and logs.

    `source` is "configured", "server: <engine> <endpoint>" or NOT_DISCOVERABLE;
    `server_window` is what the server said (None when it said nothing); `notes` are
    problems worth a warning (a configured window larger than the server's, a reply
    size that leaves no room)."""

    window: int
    source: str
    server_window: int | None = None
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "; ".join((self.source, *self.notes))


@dataclass(frozen=True, slots=True)
class _Found:
    window: int
    where: str


_CacheKey = tuple[str, str]
_cache: dict[_CacheKey, _Found | None] = {}
"""(base_url, model_id) -> what the server said: one discovery per process."""


def clear_cache() -> None:
    """Forget every discovered window, as a restart does."""
    _cache.clear()


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _entries(data: Any) -> list[dict[str, Any]]:
    items = data.get("data") if isinstance(data, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _vllm(data: Any, model_id: str) -> _Found | None:
    for entry in _entries(data):
        window = _positive(entry.get("max_model_len"))
        if entry.get("id") == model_id and window:
            return _Found(window, "vLLM /v1/models")
    return None


def _lmstudio(data: Any, model_id: str) -> _Found | None:
    for entry in _entries(data):
        if entry.get("id") != model_id:
            continue
        loaded = _positive(entry.get("loaded_context_length"))
        if loaded:
            return _Found(loaded, "LM Studio /api/v0/models loaded_context_length")
        maximum = _positive(entry.get("max_context_length"))
        if maximum:
            return _Found(maximum, "LM Studio /api/v0/models max_context_length")
    return None


def _llamacpp(data: Any, model_id: str) -> _Found | None:
    """llama.cpp serves one model, so its n_ctx is every model's on that server."""
    settings = data.get("default_generation_settings") if isinstance(data, dict) else None
    window = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return _Found(window, "llama.cpp /props") if window else None


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _ollama(data: Any, model_id: str) -> _Found | None:
    if not isinstance(data, dict):
        return None
    parameters = data.get("parameters")
    if isinstance(parameters, str):
        match = _NUM_CTX.search(parameters)
        if match and int(match.group(1)) > 0:
            return _Found(int(match.group(1)), "Ollama /api/show num_ctx")
    info = data.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            window = _positive(value)
            if key.endswith(".context_length") and window:
                return _Found(window, "Ollama /api/show context_length")
    return None


Reader = Callable[[Any, str], _Found | None]


def _rank(found: _Found) -> int:
    """Ollama's num_ctx is what a request gets: first. Its context_length is only the
    model's trained maximum, which a request does not get unless num_ctx says so: last."""
    if found.where.startswith("Ollama"):
        return 0 if found.where.endswith("num_ctx") else 2
    return 1


class _Fetcher:
    """GETs each provider-wide endpoint once, however many models share the provider."""

    def __init__(self, client: httpx.AsyncClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout
        self._gets: dict[str, asyncio.Task[Any]] = {}

    async def _json(self, method: str, url: str, provider: ProviderSpec, body: Any = None) -> Any:
        """The JSON answer, or None for any failure: a missing endpoint is the usual case."""
        try:
            response = await self._client.request(
                method, url, json=body, headers=auth_headers(provider), timeout=self._timeout
            )
            if response.status_code != 200:
                return None
            return response.json()
        except (httpx.HTTPError, ValueError):
            return None

    def get(self, url: str, provider: ProviderSpec) -> Awaitable[Any]:
        if url not in self._gets:
            self._gets[url] = asyncio.ensure_future(self._json("GET", url, provider))
        return asyncio.shield(self._gets[url])

    def post(self, url: str, provider: ProviderSpec, body: Any) -> Awaitable[Any]:
        return self._json("POST", url, provider, body)

    def cancel(self) -> None:
        for task in self._gets.values():
            task.cancel()


def _anthropic(data: Any, model_id: str) -> _Found | None:
    window = _positive(data.get("max_input_tokens")) if isinstance(data, dict) else None
    return _Found(window, "Anthropic /v1/models max_input_tokens") if window else None


def _gemini(data: Any, model_id: str) -> _Found | None:
    window = _positive(data.get("inputTokenLimit")) if isinstance(data, dict) else None
    return _Found(window, "Gemini models.get inputTokenLimit") if window else None


async def _ask_vendor(fetcher: _Fetcher, model: ModelSpec, provider: ProviderSpec) -> _Found | None:
    """A native provider's model record: Anthropic's `GET /v1/models/{id}`, Gemini's
    `GET /v1beta/models/{id}`."""
    assert provider.base_url is not None
    root = provider.base_url.rstrip("/")
    if provider.kind == "anthropic":
        url, read = f"{root}/v1/models/{model.model_id}", _anthropic
    else:
        url, read = f"{root}/v1beta/models/{model.model_id.removeprefix('models/')}", _gemini
    return read(await fetcher.get(url, provider), model.model_id)


async def _ask(fetcher: _Fetcher, model: ModelSpec, provider: ProviderSpec) -> _Found | None:
    """What the server says about `model`'s window, trying every engine's endpoint at once.

    One server is one engine, so at most one of them normally answers; if several do,
    `_rank` and then the order below decide."""
    assert provider.base_url is not None
    if provider.kind in ("anthropic", "gemini"):
        return await _ask_vendor(fetcher, model, provider)
    base = provider.base_url.rstrip("/")
    root = server_root(base)
    asks: list[tuple[Reader, Awaitable[Any]]] = [
        (_ollama, fetcher.post(f"{root}/api/show", provider, {"model": model.model_id})),
        (_vllm, fetcher.get(f"{base}/models", provider)),
        (_lmstudio, fetcher.get(f"{root}/api/v0/models", provider)),
        (_llamacpp, fetcher.get(f"{root}/props", provider)),
    ]
    answers = await asyncio.gather(*(answer for _, answer in asks))
    found = [read(data, model.model_id) for (read, _), data in zip(asks, answers, strict=True)]
    return min((item for item in found if item is not None), key=_rank, default=None)


def _source(model: ModelSpec, found: _Found | None) -> WindowSource:
    notes: list[str] = []
    if model.context_window is not None:
        window, source = model.context_window, "configured"
        if found is not None and model.context_window > found.window:
            notes.append(
                f"configured window {model.context_window:,} is larger than the server's "
                f"{found.window:,} ({found.where}): prompts may be refused"
            )
    elif found is not None:
        window, source = found.window, f"server: {found.where}"
        if found.where == "Ollama /api/show context_length":
            notes.append(
                "Ollama gives a request its default num_ctx unless the model sets one: "
                "set num_ctx in the Modelfile, or context_window here, to be sure"
            )
    else:
        window, source = DEFAULT_WINDOW, NOT_DISCOVERABLE
    if model.max_output_tokens is not None and model.max_output_tokens >= window:
        notes.append(
            f"max_output_tokens {model.max_output_tokens:,} is not less than the window "
            f"{window:,}: the reply would leave no room for the prompt"
        )
    return WindowSource(
        window=window,
        source=source,
        server_window=found.window if found is not None else None,
        notes=tuple(notes),
    )


async def discover(
    catalog: Catalog,
    *,
    timeout: float = PROBE_TIMEOUT,
    refresh: bool = False,
    client: httpx.AsyncClient | None = None,
) -> tuple[Catalog, dict[str, WindowSource]]:
    """The catalog with discovered windows filled in, and where each model's came from.

    Every model of an `openai` provider is asked (a configured one too, to report a
    mismatch), all at once, each endpoint within `timeout`. Answers are cached per
    (base_url, model_id) for the life of the process; `refresh` asks again. Never raises.
    """
    pending: dict[str, _CacheKey] = {}
    for model in catalog.models.values():
        provider = catalog.providers[model.provider]
        if provider.kind in ("openai", "anthropic", "gemini") and provider.base_url is not None:
            key = (provider.base_url, model.model_id)
            if refresh or key not in _cache:
                pending[model.name] = key
    if pending:
        await _ask_all(catalog, pending, timeout, client)
    models: dict[str, ModelSpec] = {}
    sources: dict[str, WindowSource] = {}
    for name, model in catalog.models.items():
        provider = catalog.providers[model.provider]
        found = _cache.get((provider.base_url, model.model_id)) if provider.base_url else None
        source = _source(model, found)
        sources[name] = source
        if model.context_window is None and found is not None:
            model = model.model_copy(update={"context_window": found.window})
        models[name] = model
        if source.source == NOT_DISCOVERABLE:
            log.warning("model %s: window %s", name, source.source)
        for note in source.notes:
            log.warning("model %s: %s", name, note)
    return catalog.model_copy(update={"models": models}), sources


async def _ask_all(
    catalog: Catalog,
    pending: dict[str, _CacheKey],
    timeout: float,
    client: httpx.AsyncClient | None,
) -> None:
    own = client is None
    http = client if client is not None else engine_client(timeout)
    fetcher = _Fetcher(http, timeout)
    names = list(pending)

    async def one(name: str) -> _Found | None:
        model = catalog.models[name]
        try:
            return await _ask(fetcher, model, catalog.providers[model.provider])
        except Exception:  # discovery must never stop the app; the default is safe
            log.exception("model %s: window discovery failed", name)
            return None

    try:
        async with asyncio.timeout(timeout * 2):
            results = await asyncio.gather(*(one(name) for name in names))
    except TimeoutError:
        results = [None] * len(names)
    finally:
        fetcher.cancel()
        if own:
            await http.aclose()
    for name, found in zip(names, results, strict=True):
        _cache[pending[name]] = found
