"""Providers by kind: the catalog names a kind, this builds the client for it."""

from __future__ import annotations

from webapp.llm.affinity import Affinity
from webapp.llm.catalog import ProviderSpec
from webapp.llm.engine import provider_api_key
from webapp.llm.providers.base import Provider
from webapp.llm.providers.transport import TransportKind


def build_provider(spec: ProviderSpec, transport_kind: TransportKind = "asyncio") -> Provider:
    if spec.kind == "demo":
        from webapp.llm.providers.demo import DemoProvider

        return DemoProvider()
    assert spec.base_url is not None, "the catalog guarantees a base_url for these kinds"
    key = provider_api_key(spec)
    affinity = Affinity(spec.cache_key, spec.slots, spec.session_header)
    if spec.kind == "anthropic":
        from webapp.llm.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            spec.base_url,
            api_key=key,
            timeout=spec.timeout,
            transport_kind=transport_kind,
            affinity=affinity,
        )
    if spec.kind == "gemini":
        from webapp.llm.providers.gemini import GeminiProvider

        return GeminiProvider(
            spec.base_url,
            api_key=key,
            timeout=spec.timeout,
            transport_kind=transport_kind,
            affinity=affinity,
        )
    from webapp.llm.providers.openai import OpenAIProvider

    return OpenAIProvider(
        spec.base_url,
        api_key=key,
        timeout=spec.timeout,
        transport_kind=transport_kind,
        affinity=affinity,
    )
