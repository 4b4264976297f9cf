"""Providers by kind: the catalog names a kind, this builds the client for it."""

from __future__ import annotations

import os

from webapp.llm.catalog import ProviderSpec
from webapp.llm.providers.base import Provider


def build_provider(spec: ProviderSpec) -> Provider:
    if spec.kind == "demo":
        from webapp.llm.providers.demo import DemoProvider

        return DemoProvider()
    from webapp.llm.providers.openai import OpenAIProvider

    assert spec.base_url is not None, "the catalog guarantees a base_url for openai providers"
    api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    return OpenAIProvider(spec.base_url, api_key=api_key, timeout=spec.timeout)
