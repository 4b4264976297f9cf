"""Windows of native models left out of the catalog come from the vendor's model record:
Anthropic's `GET /v1/models/{id}` `max_input_tokens`, Gemini's `models.get`
`inputTokenLimit`, asked with each vendor's own key header (tests/vendors.py checks it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vendors import ANTHROPIC_KEY, GEMINI_KEY, FakeVendors
from webapp.llm import discovery
from webapp.llm.catalog import load_catalog
from webapp.llm.tokenizers import Tokenizers


async def test_windows_come_from_the_vendors_model_records(
    vendors: FakeVendors, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("FAKE_GEMINI_KEY", GEMINI_KEY)
    path = tmp_path / "native.toml"
    path.write_text(
        f"""
[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_ANTHROPIC_KEY"

[[providers]]
name = "google"
kind = "gemini"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_GEMINI_KEY"

[[models]]
name = "claude-large"
provider = "claude"
model_id = "claude-large"

[[models]]
name = "gemini-small"
provider = "google"
model_id = "gemini-small"

[[models]]
name = "claude-configured"
provider = "claude"
model_id = "claude-small"
context_window = 8192

[[configurations]]
name = "c"
model = "claude-large"
"""
    )
    discovery.clear_cache()
    catalog, sources = await discovery.discover(load_catalog(path))
    discovery.clear_cache()
    assert catalog.models["claude-large"].context_window == 200_000
    assert sources["claude-large"].source == "server: Anthropic /v1/models max_input_tokens"
    assert catalog.models["gemini-small"].context_window == 4096
    assert sources["gemini-small"].source == "server: Gemini models.get inputTokenLimit"
    configured = sources["claude-configured"]
    assert configured.source == "configured" and configured.server_window == 4096
    assert any("larger than the server's" in note for note in configured.notes)


async def test_auto_counts_each_message_with_the_vendors_count_tokens(
    vendors: FakeVendors, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("FAKE_GEMINI_KEY", GEMINI_KEY)
    path = tmp_path / "counted.toml"
    path.write_text(
        f"""
[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_ANTHROPIC_KEY"

[[providers]]
name = "google"
kind = "gemini"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_GEMINI_KEY"

[[models]]
name = "claude-small"
provider = "claude"
model_id = "claude-small"
tokenizer = "server"

[[models]]
name = "gemini-small"
provider = "google"
model_id = "gemini-small"

[[configurations]]
name = "c"
model = "claude-small"
"""
    )
    catalog = load_catalog(path)
    texts = ["Hello, world!", "नमस्ते दुनिया, यह एक परीक्षण है", '{"a": [1, 2, 3]}']
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        assert tokenizers.errors == {}
        for name, where in (("claude-small", "count_tokens"), ("gemini-small", ":countTokens")):
            model = catalog.models[name]
            assert where in tokenizers.describe(model)
            tokenizer = tokenizers.for_model(model)
            assert tokenizer.exact and tokenizer.id == f"server:{name}"
            assert await tokenizer.count(texts) == [vendors.count(text) for text in texts]
