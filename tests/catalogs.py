"""Catalog files for tests, pointing at the fake upstream (tests/upstream/)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from webapp.llm.catalog import Catalog, load_catalog

CLOSED_PORT_URL = "http://127.0.0.1:9/v1"
"""The discard port: nothing listens there, so connecting is refused at once."""

SUMMED_TOML = """
[[configurations]]
name = "summed"
model = "medium"
system_prompt = "You are a test model."
summarize = true
summary_max_tokens = 200
"""
"""Configuration "summed": the upstream's `medium`, summarizing what its cut leaves out
(`extra` for `upstream_toml`, or a part of one)."""


class Upstream(Protocol):
    """What a catalog needs of an upstream (the fake one, in process or not): its URL."""

    @property
    def base_url(self) -> str: ...


def upstream_toml(upstream: Upstream, extra: str = "", timeout: float = 5) -> str:
    """`timeout`: how long provider "up" may go without sending data before the answer fails."""
    return f"""
[[providers]]
name = "up"
kind = "openai"
base_url = "{upstream.base_url}"
timeout = {timeout:g}

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


def write_upstream_catalog(
    path: Path, upstream: Upstream, extra: str = "", timeout: float = 5
) -> Path:
    path.write_text(upstream_toml(upstream, extra, timeout), encoding="utf-8")
    return path


def upstream_catalog(tmp_path: Path, upstream: Upstream, extra: str = "") -> Catalog:
    return load_catalog(write_upstream_catalog(tmp_path / "catalog.toml", upstream, extra))


def write_catalog(folder: Path, base_url: str, models: str) -> Path:
    """A catalog with provider "up" at `base_url` and the given [[models]] text."""
    path = folder / "catalog.toml"
    path.write_text(
        f"""
[[providers]]
name = "up"
kind = "openai"
base_url = "{base_url}"
api_key_env = "COUNTING_TEST_KEY"

[[providers]]
name = "demo"
kind = "demo"

{models}

[[configurations]]
name = "c"
model = "m"
"""
    )
    return path


def model_toml(name: str = "m", tokenizer: str | None = None, model_id: str = "medium") -> str:
    line = f'tokenizer = "{tokenizer}"\n' if tokenizer is not None else ""
    return f'[[models]]\nname = "{name}"\nprovider = "up"\nmodel_id = "{model_id}"\n{line}'


def catalog_for(tmp_path: Path, up: Upstream, tokenizer: str | None = None) -> Catalog:
    return load_catalog(write_catalog(tmp_path, up.base_url, model_toml(tokenizer=tokenizer)))


def engine_provider_toml(upstream: Upstream) -> str:
    """Provider "engine": a serving engine (the fake upstream, as the engine it is set to
    be), for catalogs that declare its models themselves."""
    return f"""
[[providers]]
name = "engine"
kind = "openai"
base_url = "{upstream.base_url}"
timeout = 5
"""


def engine_toml(upstream: Upstream) -> str:
    return (
        engine_provider_toml(upstream)
        + """
[[models]]
name = "gemma"
provider = "engine"
model_id = "medium"
context_window = 4096
max_output_tokens = 200

[[models]]
name = "gemma-twin"
provider = "engine"
model_id = "medium"
context_window = 4096
max_output_tokens = 200

[[models]]
name = "guess"
provider = "engine"
model_id = "medium"
context_window = 4096
max_output_tokens = 200
tokenizer = "estimate"

# How full a send is measures the counts, so the fill configurations keep as many turns
# as fit on every send (`trim_to = 1.0`); a moved cut goes down to trim_to on purpose.
[[configurations]]
name = "gemma"
model = "gemma"
trim_to = 1.0

[[configurations]]
name = "twin"
model = "gemma-twin"

[[configurations]]
name = "briefed"
model = "gemma"
system_prompt = "You are a careful assistant. Answer in one short paragraph."

[[configurations]]
name = "guess"
model = "guess"
trim_to = 1.0
"""
    )


def seer(name: str, model_id: str, window: int, extra: str = "") -> str:
    """A model that sees, served by the fake upstream as `model_id`."""
    return (
        f'[[models]]\nname = "{name}"\nprovider = "up"\nmodel_id = "{model_id}"\n'
        f"context_window = {window}\nmax_output_tokens = {window // 10}\n"
        f'capabilities = ["chat", "vision"]\n{extra}\n'
    )


SEEING = (  # `extra` for the fake upstream's catalog: models that see, and their routes
    seer("seer", "large", 16384)
    + seer("seer-local", "medium", 16384, "image_tokens = 300")
    + seer("seer-small", "small", 1024)
    + """
[[configurations]]
name = "seeing"
model = "seer"
fallbacks = ["large", "seer-local"]

[[configurations]]
name = "seeing-small"
model = "seer-small"
"""
)
