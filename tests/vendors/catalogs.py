"""Catalogs on the fakes: the two native providers, and the variables their keys are
read from."""

from __future__ import annotations

from tests.vendors.fake import FakeVendors
from tests.vendors.rules import ANTHROPIC_KEY, GEMINI_KEY

KEY_ENV = {"FAKE_ANTHROPIC_KEY": ANTHROPIC_KEY, "FAKE_GEMINI_KEY": GEMINI_KEY}
"""The variables the catalogs of `providers_toml` read the fakes' keys from."""


def providers_toml(vendors: FakeVendors) -> str:
    """A catalog's two native providers served by the fakes: `claude` (kind "anthropic")
    and `google` (kind "gemini"), keys from KEY_ENV's variables; models and
    configurations are the caller's to add."""
    return f"""
[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_ANTHROPIC_KEY"
timeout = 5

[[providers]]
name = "google"
kind = "gemini"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_GEMINI_KEY"
timeout = 5
"""
