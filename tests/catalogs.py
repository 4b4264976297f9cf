"""Catalog files for tests, pointing at the fake upstream (tests/upstream.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from webapp.llm.catalog import Catalog, load_catalog

CLOSED_PORT_URL = "http://127.0.0.1:9/v1"
"""The discard port: nothing listens there, so connecting is refused at once."""


class Upstream(Protocol):
    """What a catalog needs of an upstream (the fake one, in process or not): its URL."""

    @property
    def base_url(self) -> str: ...


def upstream_toml(upstream: Upstream, extra: str = "") -> str:
    return f"""
[[providers]]
name = "up"
kind = "openai"
base_url = "{upstream.base_url}"
timeout = 5

[[providers]]
name = "down"
kind = "openai"
base_url = "{CLOSED_PORT_URL}"
timeout = 2

[[models]]
name = "small"
provider = "up"
context_window = 1024
max_output_tokens = 100
capabilities = ["chat", "tools", "completion", "embedding"]
cost_input = 0.1
cost_output = 0.2

[[models]]
name = "medium"
provider = "up"
context_window = 4096
max_output_tokens = 200
capabilities = ["chat", "tools"]
cost_input = 1.0
cost_output = 2.0

[[models]]
name = "large"
provider = "up"
context_window = 16384
max_output_tokens = 400
capabilities = ["chat", "tools"]
cost_input = 5.0
cost_output = 10.0

[[models]]
name = "optimistic"
provider = "up"
model_id = "small"
context_window = 3072
max_output_tokens = 100
capabilities = ["chat"]

[[models]]
name = "unreachable"
provider = "down"
model_id = "small"
context_window = 1024
max_output_tokens = 100

[[configurations]]
name = "small"
model = "small"
system_prompt = "You are a test model."

[[configurations]]
name = "medium"
model = "medium"

[[configurations]]
name = "large"
model = "large"

[[configurations]]
name = "small-then-medium"
model = "small"
fallbacks = ["medium"]

[[configurations]]
name = "unreachable-then-medium"
model = "unreachable"
fallbacks = ["medium"]

[[configurations]]
name = "cheapest-4k"
criteria = {{ min_context_window = 4000, prefer_lowest_cost = true }}

[[configurations]]
name = "optimistic"
model = "optimistic"
{extra}
"""


def write_upstream_catalog(path: Path, upstream: Upstream, extra: str = "") -> Path:
    path.write_text(upstream_toml(upstream, extra), encoding="utf-8")
    return path


def upstream_catalog(tmp_path: Path, upstream: Upstream, extra: str = "") -> Catalog:
    return load_catalog(write_upstream_catalog(tmp_path / "catalog.toml", upstream, extra))
