"""Where a serving engine's own endpoints live and how to call them.

Engines (llama.cpp, vLLM, Ollama, LM Studio) serve the OpenAI API under a prefix
(`base_url`, e.g. ``http://host:8080/v1``) but their tokenize, props and show
endpoints at the server root. Both the tokenizers and window discovery need that
root, the provider's key and a short-timeout client; this module is the one place
that knows how to build them.
"""

from __future__ import annotations

import os

import httpx

from webapp.llm.catalog import ProviderSpec

PROBE_TIMEOUT = 2.0
"""Seconds an engine endpoint may take: a slow or absent one must never stall a send
or the start of the app."""


UNREPORTED_CACHE = (
    "its engine reported no prompt cache figures: vLLM reports them when started with "
    "--enable-prompt-tokens-details, SGLang with --enable-cache-report (llama.cpp's "
    "llama-server always does)"
)
"""What a model whose answers carry no cache figures is told, by check-config and the
admin review: the server flag that turns them on."""


def server_root(base_url: str) -> str:
    """The server root of an OpenAI-style `base_url`: a trailing ``/v1`` is stripped."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root


def provider_api_key(spec: ProviderSpec) -> str | None:
    """The provider's key from the variable its `api_key_env` names (the file holds only
    the name), or None when it has none or the variable is unset or empty."""
    if not spec.api_key_env:
        return None
    return os.environ.get(spec.api_key_env) or None


def auth_headers(spec: ProviderSpec) -> dict[str, str]:
    """The provider's key as its API takes it: a bearer token (engines started with
    ``--api-key`` guard their own endpoints with it too), Anthropic's `x-api-key` with
    its `anthropic-version`, or Gemini's `x-goog-api-key`."""
    key = provider_api_key(spec)
    if spec.kind == "anthropic":
        return {"anthropic-version": "2023-06-01", **({"x-api-key": key} if key else {})}
    if spec.kind == "gemini":
        return {"x-goog-api-key": key} if key else {}
    return {"Authorization": f"Bearer {key}"} if key else {}


def engine_client(timeout: float = PROBE_TIMEOUT) -> httpx.AsyncClient:
    """A client whose every phase (connect, read, pool) is bounded by `timeout`."""
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=False)
