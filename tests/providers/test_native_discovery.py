"""Windows and counts of native models, as `webapp check-config` shows them: windows left
out of the catalog come from the vendor's model record (Anthropic's `GET /v1/models/{id}`
`max_input_tokens`, Gemini's `models.get` `inputTokenLimit`), counts from its count-tokens
endpoint, each asked with the vendor's own key header (tests/vendors/ checks it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import run_in_child
from tests.vendors import KEY_ENV, FakeVendors, providers_toml
from webapp.llm.catalog import load_catalog
from webapp.llm.tokenizers import EndpointTokenizer, Tokenizers, TokenizerUnavailable

MODELS = """
[[models]]
name = "claude-large"
provider = "claude"
model_id = "claude-large"

[[models]]
name = "claude-configured"
provider = "claude"
model_id = "claude-small"
context_window = 8192
tokenizer = "server"

[[models]]
name = "gemini-small"
provider = "google"
model_id = "gemini-small"

[[configurations]]
name = "claude"
model = "claude-large"

[[configurations]]
name = "gemini"
model = "gemini-small"
"""


def native_catalog(vendors: FakeVendors, folder: Path) -> Path:
    path = folder / "native.toml"
    path.write_text(providers_toml(vendors) + MODELS, encoding="utf-8")
    return path


def test_check_config_shows_discovered_windows_and_exact_counts(
    vendors: FakeVendors, tmp_path: Path
) -> None:
    """The command as a shell runs it (a process of its own), against the fakes; its output
    is the sample in docs/providers.md."""
    database = f"sqlite+aiosqlite:///{tmp_path / 'none.db'}"
    result = run_in_child(
        "check-config",
        str(native_catalog(vendors, tmp_path)),
        env={**KEY_ENV, "WEBAPP_DATABASE_URL": database},
    )
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    at = {line: number for number, line in enumerate(lines)}
    expected = [
        (
            "model 'claude-large': window 200,000 (server: Anthropic /v1/models max_input_tokens)",
            "tokenizer: server (anthropic count_tokens)",
        ),
        (
            "model 'claude-configured': window 8,192 (configured)",
            "tokenizer: server (anthropic count_tokens)",
        ),
        (
            "model 'gemini-small': window 4,096 (server: Gemini models.get inputTokenLimit)",
            "tokenizer: server (gemini :countTokens)",
        ),
    ]
    for window, tokenizer in expected:
        assert window in at, result.stdout
        assert lines[at[window] + 1] == tokenizer, result.stdout
    warning = next(line for line in lines if line.startswith("warning:"))
    assert "larger than the server's" in warning and "4,096" in warning, result.stdout
    assert "configuration 'gemini': served by gemini-small (window 4,096;" in result.stdout
    assert {"/v1/models/claude-large", "/v1/messages/count_tokens"} <= {
        r["path"] for r in vendors.requests
    }


async def test_auto_counts_each_message_with_the_vendors_count_tokens(
    vendors: FakeVendors, vendor_keys: None, tmp_path: Path
) -> None:
    catalog = load_catalog(native_catalog(vendors, tmp_path))
    texts = ["Hello, world!", "नमस्ते दुनिया, यह एक परीक्षण है", '{"a": [1, 2, 3]}']
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        assert tokenizers.errors == {}
        for name in ("claude-configured", "gemini-small"):
            tokenizer = tokenizers.for_model(catalog.models[name])
            assert tokenizer.exact and tokenizer.id == f"server:{name}"
            assert await tokenizer.count(texts) == [vendors.count(text) for text in texts]


async def test_a_text_the_vendor_cannot_be_sent_does_not_rest_its_count_tokens(
    vendors: FakeVendors, vendor_keys: None, tmp_path: Path
) -> None:
    """A lone surrogate is no UTF-8: its request is never made, which says nothing of the
    vendor's endpoint, so it goes on counting (as an engine's tokenize endpoint does)."""
    catalog = load_catalog(native_catalog(vendors, tmp_path))
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        tokenizer = tokenizers.for_model(catalog.models["claude-configured"])
        assert isinstance(tokenizer, EndpointTokenizer)
        with pytest.raises(TokenizerUnavailable, match="cannot send the text"):
            await tokenizer.count(["fine", "a\ud800b"])
        assert not tokenizer.is_down
        assert await tokenizer.count(["hello"]) == [vendors.count("hello")]


@pytest.mark.parametrize("model", ["claude-configured", "gemini-small"])
async def test_a_vendors_count_tokens_gets_a_bounded_number_of_requests_at_once(
    model: str, vendors: FakeVendors, vendor_keys: None, tmp_path: Path
) -> None:
    """A long conversation's first count is one request a message: they go out
    concurrently, but never more than the tokenizers' concurrency at once (a vendor
    rate-limits a burst)."""
    catalog = load_catalog(native_catalog(vendors, tmp_path))
    async with Tokenizers(concurrency=4) as tokenizers:
        await tokenizers.probe(catalog)
        vendors.count_delay = 0.1
        texts = [f"message number {n}" for n in range(24)]
        counted = await tokenizers.for_model(catalog.models[model]).count(texts)
    assert counted == [vendors.count(text) for text in texts]
    # Concurrent, never over the bound (on a loaded machine a request may end before
    # the fourth has started, so exactly four is not promised).
    assert 2 <= vendors.counts_in_flight_peak <= 4
