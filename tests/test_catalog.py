"""The catalog: what a valid file becomes, and that every mistake is named precisely.

Each error test checks the whole prefix of the line, "<file>: <entry>: field '<field>': ",
because a message that names the problem but not where it is costs the user a search.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

import pytest
from pydantic import ValidationError

from webapp.llm.catalog import (
    DEFAULT_WINDOW,
    DEMO_WINDOW,
    Catalog,
    CatalogError,
    ConfigurationSpec,
    Criteria,
    EmbedSpec,
    ModelSpec,
    ProviderSpec,
    builtin_catalog,
    load_catalog,
    parse_catalog,
)
from webapp.llm.routing import candidates

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# A small valid file; error tests append one bad entry to it. TOML lets a
# [[models]] block appear again after [[configurations]]: it appends to models.
BASE = """
[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"

[[models]]
name = "small"
provider = "openai"
context_window = 16000
max_output_tokens = 1000
capabilities = ["chat", "tools"]
cost_input = 0.15
cost_output = 0.6

[[models]]
name = "big"
provider = "openai"
context_window = 128000
capabilities = ["chat", "tools", "vision"]
cost_input = 2.5
cost_output = 10.0

[[configurations]]
name = "default"
model = "small"
"""


def write(tmp_path: Path, text: str, name: str = "catalog.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def errors_for(tmp_path: Path, text: str) -> tuple[str, list[str]]:
    """Load `text` from a file, expect it to fail, and return (file path, error lines)."""
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    return str(path), info.value.errors


def assert_reported(errors: list[str], prefix: str, *fragments: str) -> str:
    """Exactly one line starts with `prefix` and contains every fragment; return it."""
    found = [line for line in errors if line.startswith(prefix)]
    found = [line for line in found if all(f in line for f in fragments)]
    assert len(found) == 1, f"expected one line {prefix!r} with {fragments}, got:\n" + "\n".join(
        errors
    )
    return found[0]


# --------------------------------------------------------------------------- built-in


def test_no_file_gives_the_builtin_demo_catalog() -> None:
    catalog = load_catalog(None)
    assert catalog == builtin_catalog()
    assert catalog.source is None
    assert catalog.providers == {"demo": ProviderSpec(name="demo", kind="demo")}
    model = catalog.models["demo"]
    assert model == ModelSpec(
        name="demo",
        provider="demo",
        model_id="demo",
        context_window=DEMO_WINDOW,
        max_output_tokens=256,
        capabilities=frozenset({"chat", "completion", "tools"}),
        tokenizer="estimate",
    )
    assert model.window == DEMO_WINDOW == 2048
    configuration = catalog.configurations["demo"]
    assert configuration.model == "demo"
    assert configuration.system_prompt
    assert catalog.default_configuration == "demo"
    assert catalog.embeds == {}


# --------------------------------------------------------------------------- a full file

FULL = """
[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/v1/"
api_key_env = "OPENAI_API_KEY"
timeout = 30

[[providers]]
name = "ollama"
kind = "openai"
base_url = "http://127.0.0.1:11434/v1"
timeout = 300

[[providers]]
name = "llamacpp"
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"

[[providers]]
name = "offline"
kind = "demo"

[[models]]
name = "gpt-4o-mini"
provider = "openai"
context_window = 128000
max_output_tokens = 16384
capabilities = ["chat", "tools", "vision"]
cost_input = 0.15
cost_output = 0.6

[[models]]
name = "llama"
provider = "ollama"
model_id = "llama3.1:8b"
context_window = 8192
max_output_tokens = 1024
capabilities = ["chat", "tools"]
cost_input = 0
cost_output = 0

[[models]]
name = "local"
provider = "llamacpp"

[[models]]
name = "toy"
provider = "offline"

[[configurations]]
name = "everyday"
model = "gpt-4o-mini"
system_prompt = "Be brief."
max_tokens = 2000
fallbacks = ["llama", "local"]

[[configurations]]
name = "cheap"

[configurations.criteria]  # the same as an inline table
capabilities = ["chat", "tools"]
min_context_window = 8000
max_cost_input = 1
prefer_lowest_cost = true

[[embeds]]
name = "help"
configuration = "everyday"
allowed_origins = ["https://www.example.com", "http://localhost:3000"]
title = "Help"
greeting = "Hi!"
"""


def test_full_file_parses_into_the_right_specs(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    catalog = load_catalog(path)

    assert catalog.source == str(path)
    assert list(catalog.providers) == ["openai", "ollama", "llamacpp", "offline"]
    assert catalog.providers["openai"] == ProviderSpec(
        name="openai",
        kind="openai",
        base_url="https://api.openai.com/v1",  # trailing slash dropped
        api_key_env="OPENAI_API_KEY",
        timeout=30.0,
    )
    assert catalog.providers["ollama"] == ProviderSpec(
        name="ollama", kind="openai", base_url="http://127.0.0.1:11434/v1", timeout=300.0
    )
    assert catalog.providers["llamacpp"].timeout == 60.0
    assert catalog.providers["offline"] == ProviderSpec(name="offline", kind="demo")

    assert list(catalog.models) == ["gpt-4o-mini", "llama", "local", "toy"]
    assert catalog.models["gpt-4o-mini"] == ModelSpec(
        name="gpt-4o-mini",
        provider="openai",
        model_id="gpt-4o-mini",  # defaults to the name
        context_window=128000,
        max_output_tokens=16384,
        capabilities=frozenset({"chat", "tools", "vision"}),
        cost_input=0.15,
        cost_output=0.6,
    )
    llama = catalog.models["llama"]
    assert llama.model_id == "llama3.1:8b"
    assert (llama.cost_input, llama.cost_output) == (0.0, 0.0)
    assert isinstance(llama.cost_input, float)

    local = catalog.models["local"]
    assert local.capabilities == frozenset({"chat"})  # the default
    assert local.context_window is None and local.window == DEFAULT_WINDOW
    toy = catalog.models["toy"]
    assert toy.context_window == DEMO_WINDOW  # a demo provider's default window

    assert catalog.configurations["everyday"] == ConfigurationSpec(
        name="everyday",
        model="gpt-4o-mini",
        system_prompt="Be brief.",
        max_tokens=2000,
        fallbacks=("llama", "local"),
    )
    cheap = catalog.configurations["cheap"]
    assert cheap.model is None
    assert cheap.criteria == Criteria(
        capabilities=frozenset({"chat", "tools"}),
        min_context_window=8000,
        max_cost_input=1.0,
        prefer_lowest_cost=True,
    )
    assert catalog.default_configuration == "everyday"
    assert catalog.embeds == {
        "help": EmbedSpec(
            name="help",
            configuration="everyday",
            allowed_origins=("https://www.example.com", "http://localhost:3000"),
            title="Help",
            greeting="Hi!",
        )
    }


def test_parse_catalog_accepts_already_parsed_data() -> None:
    data = {
        "providers": [{"name": "p", "kind": "demo"}],
        "models": [{"name": "m", "provider": "p"}],
        "configurations": [{"name": "c", "model": "m"}],
    }
    catalog = parse_catalog(data, "inline")
    assert catalog.source == "inline"
    assert catalog.models["m"].window == DEMO_WINDOW


def test_missing_api_key_variable_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is looked up at call time, so a catalog can be checked on a machine without it."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    catalog = load_catalog(write(tmp_path, BASE))
    assert catalog.providers["openai"].api_key_env == "OPENAI_API_KEY"


@pytest.mark.parametrize(
    "name",
    ["openai.toml", "ollama.toml", "llamacpp.toml", "vllm.toml", "anthropic.toml", "gemini.toml"],
)
def test_example_files_load(name: str) -> None:
    catalog = load_catalog(EXAMPLES / name)
    assert catalog.configurations
    for configuration in catalog.configurations.values():
        if configuration.criteria is not None:
            assert candidates(catalog, configuration.criteria)


def test_openai_example_shows_criteria_fallbacks_and_embeds() -> None:
    catalog = load_catalog(EXAMPLES / "openai.toml")
    assert catalog.providers["openai"].api_key_env == "OPENAI_API_KEY"
    assert any(c.criteria is not None for c in catalog.configurations.values())
    assert any(c.fallbacks for c in catalog.configurations.values())
    assert catalog.embeds


def test_native_examples_default_to_the_vendors_roots() -> None:
    anthropic = load_catalog(EXAMPLES / "anthropic.toml").providers["anthropic"]
    gemini = load_catalog(EXAMPLES / "gemini.toml").providers["gemini"]
    assert (anthropic.kind, anthropic.base_url) == ("anthropic", "https://api.anthropic.com")
    assert (gemini.kind, gemini.base_url) == (
        "gemini",
        "https://generativelanguage.googleapis.com",
    )


def test_local_examples_point_at_local_servers() -> None:
    ollama = load_catalog(EXAMPLES / "ollama.toml")
    assert [p.base_url for p in ollama.providers.values()] == ["http://127.0.0.1:11434/v1"]
    llamacpp = load_catalog(EXAMPLES / "llamacpp.toml")
    assert llamacpp.providers["llamacpp"].base_url == "http://127.0.0.1:8080/v1"
    vllm = load_catalog(EXAMPLES / "vllm.toml")
    assert vllm.providers["vllm"].base_url == "http://127.0.0.1:8000/v1"
    # The local engines' windows and tokenizers are left to discovery.
    for model in (llamacpp.models["llama-3.2-3b"], vllm.models["qwen2.5-7b"]):
        assert model.context_window is None and model.tokenizer == "auto", model.name


# --------------------------------------------------------------------------- criteria


def _model(
    name: str,
    window: int | None,
    cost: tuple[float | None, float | None] | None,
    capabilities: tuple[Literal["chat", "vision", "embedding"], ...] = ("chat",),
) -> ModelSpec:
    return ModelSpec(
        name=name,
        provider="p",
        model_id=name,
        context_window=window,
        capabilities=frozenset(capabilities),
        cost_input=cost[0] if cost else None,
        cost_output=cost[1] if cost else None,
    )


MODELS = [
    _model("a", 8192, (1.0, 1.0)),
    _model("b", 32000, (0.5, 0.5), ("chat", "vision")),
    _model("c", 32000, None),
    _model("d", None, (0.0, 0.0)),
    _model("e", 64000, (0.5, 0.0), ("embedding",)),
    _model("f", 16000, (0.1, None)),  # half a price is an unknown price
]


def _catalog(models: list[ModelSpec]) -> Catalog:
    return Catalog(
        providers={"p": ProviderSpec(name="p", kind="demo")},
        models={model.name: model for model in models},
        configurations={"x": ConfigurationSpec(name="x", model="a")},
        embeds={},
    )


def _names(models: list[ModelSpec]) -> list[str]:
    return [model.name for model in models]


def test_candidates_default_to_largest_window_first_then_name() -> None:
    catalog = _catalog(MODELS)
    chat = Criteria(capabilities=frozenset({"chat"}))
    assert _names(candidates(catalog, chat)) == ["b", "c", "f", "a", "d"]


def test_candidates_by_lowest_cost_put_unknown_cost_last() -> None:
    catalog = _catalog(MODELS)
    cheap = Criteria(capabilities=frozenset({"chat"}), prefer_lowest_cost=True)
    assert _names(candidates(catalog, cheap)) == ["d", "b", "a", "c", "f"]


def test_candidates_order_does_not_depend_on_file_order() -> None:
    shuffled = MODELS[:]
    random.Random(7).shuffle(shuffled)
    for criteria in (Criteria(), Criteria(prefer_lowest_cost=True)):
        assert candidates(_catalog(shuffled), criteria) == candidates(_catalog(MODELS), criteria)


def test_criteria_filters() -> None:
    catalog = _catalog(MODELS)
    assert _names(candidates(catalog, Criteria(min_context_window=20000))) == ["e", "b", "c"]
    # a model without a window is assumed to have DEFAULT_WINDOW
    assert "d" in _names(candidates(catalog, Criteria(min_context_window=DEFAULT_WINDOW)))
    assert _names(candidates(catalog, Criteria(capabilities=frozenset({"vision"})))) == ["b"]
    # unknown cost never passes a ceiling; the ceiling is inclusive
    ceiling = Criteria(max_cost_input=1.0)
    assert _names(candidates(catalog, ceiling)) == ["e", "b", "f", "a", "d"]
    assert not ceiling.matches(MODELS[2])
    assert candidates(catalog, Criteria(capabilities=frozenset({"chat", "embedding"}))) == []


def test_default_configuration_is_the_first_in_the_file(tmp_path: Path) -> None:
    text = BASE + '\n[[configurations]]\nname = "second"\nmodel = "big"\n'
    text = text.replace('name = "default"', 'name = "first"')
    assert load_catalog(write(tmp_path, text)).default_configuration == "first"


# --------------------------------------------------------------------------- errors, one kind each

M = "[[models]]\nname = 'x'\nprovider = 'openai'\n"  # models[2] 'x'
C = "[[configurations]]\nname = 'c'\n"  # configurations[1] 'c'
P = "[[providers]]\nname = 'p'\n"  # providers[1] 'p'
E = "[[embeds]]\nname = 'w'\nconfiguration = 'default'\n"  # embeds[0] 'w'

ERROR_CASES = [
    # (id, snippet appended to BASE, entry, field, fragment of the message)
    ("unknown-key", M + "contxt_window = 4096", "models[2] 'x'", "contxt_window",
     "did you mean 'context_window'"),
    ("missing-model-provider", "[[models]]\nname = 'x'", "models[2] 'x'", "provider",
     "required"),
    ("missing-name", "[[models]]\nprovider = 'openai'", "models[2]", "name", "required"),
    ("missing-kind", P, "providers[1] 'p'", "kind", "required"),
    ("missing-embed-origins", E, "embeds[0] 'w'", "allowed_origins", "required"),
    ("string-window", M + "context_window = '8k'", "models[2] 'x'", "context_window",
     "expected an integer, got a string ('8k')"),
    ("float-window", M + "context_window = 4096.0", "models[2] 'x'", "context_window",
     "expected an integer"),
    ("bool-is-not-int", M + "max_output_tokens = true", "models[2] 'x'", "max_output_tokens",
     "expected an integer"),
    ("string-cost", M + "cost_input = 'free'", "models[2] 'x'", "cost_input",
     "expected a number"),
    ("capabilities-not-list", M + "capabilities = 'chat'", "models[2] 'x'", "capabilities",
     "expected an array of strings"),
    ("unknown-capability", M + "capabilities = ['chat', 'vison']", "models[2] 'x'",
     "capabilities[1]", "unknown capability 'vison' (did you mean 'vision'?)"),
    ("empty-capabilities", M + "capabilities = []", "models[2] 'x'", "capabilities",
     "at least one"),
    ("prefer-not-bool", C + "criteria = { prefer_lowest_cost = 'yes' }", "configurations[1] 'c'",
     "criteria.prefer_lowest_cost", "expected true or false"),
    ("unknown-kind", P + "kind = 'antrophic'\nbase_url = 'https://x.test'", "providers[1] 'p'",
     "kind", "unknown provider kind 'antrophic'"),
    ("openai-without-base-url", P + "kind = 'openai'", "providers[1] 'p'", "base_url",
     "required for an 'openai' provider"),
    ("base-url-not-http", P + "kind = 'openai'\nbase_url = 'ftp://example.com/v1'",
     "providers[1] 'p'", "base_url", "http:// or https://"),
    ("base-url-no-scheme", P + "kind = 'openai'\nbase_url = '127.0.0.1:11434/v1'",
     "providers[1] 'p'", "base_url", "http:// or https://"),
    ("unknown-provider", "[[models]]\nname = 'x'\nprovider = 'opnai'", "models[2] 'x'",
     "provider", "unknown provider 'opnai' (did you mean 'openai'?)"),
    ("zero-window", M + "context_window = 0", "models[2] 'x'", "context_window",
     "greater than 0"),
    ("negative-window", M + "context_window = -4096", "models[2] 'x'", "context_window",
     "greater than 0"),
    ("negative-max-output", M + "max_output_tokens = -5", "models[2] 'x'", "max_output_tokens",
     "greater than 0"),
    ("zero-timeout", P + "kind = 'demo'\ntimeout = 0", "providers[1] 'p'", "timeout",
     "greater than 0"),
    ("negative-timeout", P + "kind = 'demo'\ntimeout = -1.5", "providers[1] 'p'", "timeout",
     "greater than 0"),
    ("cache-key-unknown", P + "kind = 'demo'\ncache_key = 'on'", "providers[1] 'p'",
     "cache_key", "expected 'auto' or 'off'"),
    ("zero-slots", P + "kind = 'demo'\nslots = 0", "providers[1] 'p'", "slots", "greater than 0"),
    ("session-header-spaces", P + "kind = 'demo'\nsession_header = 'X Session'",
     "providers[1] 'p'", "session_header", "should match pattern"),
    ("session-header-own", P + "kind = 'demo'\nsession_header = 'Authorization'",
     "providers[1] 'p'", "session_header", "a header the provider sets itself"),
    ("zero-max-tokens", C + "model = 'small'\nmax_tokens = 0", "configurations[1] 'c'",
     "max_tokens", "greater than 0"),
    ("max-output-equals-window", M + "context_window = 4096\nmax_output_tokens = 4096",
     "models[2] 'x'", "max_output_tokens", "less than context_window (4096)"),
    ("negative-cost-input", M + "cost_input = -1", "models[2] 'x'", "cost_input",
     "at least 0"),
    ("negative-cost-output", M + "cost_output = -0.5", "models[2] 'x'", "cost_output",
     "at least 0"),
    ("nan-cost", M + "cost_output = nan", "models[2] 'x'", "cost_output", "finite"),
    ("duplicate-provider", "[[providers]]\nname = 'openai'\nkind = 'demo'",
     "providers[1] 'openai'", "name", "duplicate name 'openai' (already used by providers[0]"),
    ("duplicate-model", "[[models]]\nname = 'big'\nprovider = 'openai'", "models[2] 'big'",
     "name", "duplicate name 'big' (already used by models[1] 'big')"),
    ("duplicate-configuration", "[[configurations]]\nname = 'default'\nmodel = 'big'",
     "configurations[1] 'default'", "name", "duplicate name 'default'"),
    ("both-model-and-criteria", C + "model = 'small'\ncriteria = { capabilities = ['chat'] }",
     "configurations[1] 'c'", "model", "not both"),
    ("neither-model-nor-criteria", C + "system_prompt = 'hi'", "configurations[1] 'c'", "model",
     "set 'model' (a fixed model) or 'criteria'"),
    ("fixed-model-missing", C + "model = 'gpt-5'", "configurations[1] 'c'", "model",
     "unknown model 'gpt-5'"),
    ("criteria-match-nothing", C + "criteria = { min_context_window = 1000000 }",
     "configurations[1] 'c'", "criteria", "no model in [[models]] matches"),
    ("criteria-cost-unknown", C + "criteria = { max_cost_input = 0.01 }",
     "configurations[1] 'c'", "criteria", "max_cost_input 0.01"),
    ("criteria-unknown-key", C + "criteria = { min_window = 1000 }", "configurations[1] 'c'",
     "criteria.min_window", "unknown key (did you mean 'min_context_window'?)"),
    ("criteria-not-table", C + "criteria = 'cheap'", "configurations[1] 'c'", "criteria",
     "expected a table"),
    ("criteria-zero-window", C + "criteria = { min_context_window = 0 }",
     "configurations[1] 'c'", "criteria.min_context_window", "greater than 0"),
    ("fallback-unknown", C + "model = 'small'\nfallbacks = ['big', 'bigg']",
     "configurations[1] 'c'", "fallbacks", "unknown model 'bigg' (did you mean 'big'?)"),
    ("summary-model-unknown", C + "model = 'small'\nsummarize = true\nsummary_model = 'bigg'",
     "configurations[1] 'c'", "summary_model", "unknown model 'bigg' (did you mean 'big'?)"),
    ("summary-max-tokens-zero", C + "model = 'small'\nsummary_max_tokens = 0",
     "configurations[1] 'c'", "summary_max_tokens", "greater than 0"),
    ("fallback-not-list", C + "model = 'small'\nfallbacks = 'big'", "configurations[1] 'c'",
     "fallbacks", "expected an array of strings"),
    ("fallback-twice", C + "model = 'small'\nfallbacks = ['big', 'big']",
     "configurations[1] 'c'", "fallbacks", "listed twice"),
    ("fallback-is-own-model", C + "model = 'small'\nfallbacks = ['small']",
     "configurations[1] 'c'", "fallbacks", "own model"),
    ("max-tokens-over-window", C + "model = 'small'\nmax_tokens = 16000",
     "configurations[1] 'c'", "max_tokens", "less than the window of model 'small' (16000)"),
    ("max-tokens-over-fallback-window", C + "model = 'big'\nmax_tokens = 20000\n"
     "fallbacks = ['small']", "configurations[1] 'c'", "fallbacks",
     "model 'small' has a window of 16000"),
    ("embed-unknown-configuration",
     "[[embeds]]\nname = 'w'\nconfiguration = 'defualt'\nallowed_origins = ['https://a.test']",
     "embeds[0] 'w'", "configuration", "unknown configuration 'defualt' (did you mean"),
    ("duplicate-embed", E + "allowed_origins = ['https://a.test']\n" + E
     + "allowed_origins = ['https://b.test']", "embeds[1] 'w'", "name", "duplicate name 'w'"),
    ("embed-name-not-url-safe", "[[embeds]]\nname = 'my widget'\nconfiguration = 'default'\n"
     "allowed_origins = ['https://a.test']", "embeds[0] 'my widget'", "name", "/embed/"),
    ("origin-star", E + "allowed_origins = ['*']", "embeds[0] 'w'", "allowed_origins",
     "wildcards are not allowed"),
    ("origin-wildcard-host", E + "allowed_origins = ['https://*.example.com']", "embeds[0] 'w'",
     "allowed_origins", "wildcards are not allowed"),
    ("origin-with-path", E + "allowed_origins = ['https://example.com/chat']", "embeds[0] 'w'",
     "allowed_origins", "use 'https://example.com'"),
    ("origin-trailing-slash", E + "allowed_origins = ['https://example.com/']", "embeds[0] 'w'",
     "allowed_origins", "drop the path"),
    ("origin-without-scheme", E + "allowed_origins = ['example.com']", "embeds[0] 'w'",
     "allowed_origins", "'example.com' is not an origin"),
    ("origin-other-scheme", E + "allowed_origins = ['ftp://example.com']", "embeds[0] 'w'",
     "allowed_origins", "http:// or https://"),
    ("origin-bad-port", E + "allowed_origins = ['https://example.com:99999']", "embeds[0] 'w'",
     "allowed_origins", "is not an origin"),
    ("origins-empty", E + "allowed_origins = []", "embeds[0] 'w'", "allowed_origins",
     "must list at least one"),
    ("api-key-env-not-a-name", P + "kind = 'demo'\napi_key_env = 'my key'", "providers[1] 'p'",
     "api_key_env", "not an environment variable name"),
    ("empty-name", "[[models]]\nname = ''\nprovider = 'openai'", "models[2]", "name",
     "must not be empty"),
    # Where pydantic finds the problem: an item of an array, a key of an inline table.
    ("capability-not-a-string", M + "capabilities = ['chat', 1]", "models[2] 'x'",
     "capabilities[1]", "or 'vision', got an integer (1)"),
    ("fallback-blank", C + "model = 'small'\nfallbacks = ['big', ' ']", "configurations[1] 'c'",
     "fallbacks[1]", "must not be empty"),
    ("origin-not-a-string", E + "allowed_origins = [true]", "embeds[0] 'w'",
     "allowed_origins[0]", "expected a string, got a boolean (True)"),
    ("criteria-wrong-type", C + "criteria = { min_context_window = '8k' }",
     "configurations[1] 'c'", "criteria.min_context_window",
     "expected an integer, got a string ('8k')"),
    ("criteria-capability-item", C + "criteria = { capabilities = [1] }",
     "configurations[1] 'c'", "criteria.capabilities[0]", "expected 'chat', 'completion'"),
    ("criteria-unknown-capability", C + "criteria = { capabilities = ['chatt'] }",
     "configurations[1] 'c'", "criteria.capabilities[0]", "unknown capability 'chatt'"),
    ("provider-unknown-key", P + "kind = 'demo'\nbase_ur = 'http://x.test'", "providers[1] 'p'",
     "base_ur", "unknown key (did you mean 'base_url'?)"),
    ("embed-unknown-key", E + "allowed_origins = ['https://a.test']\ncolour = 'red'",
     "embeds[0] 'w'", "colour", "unknown key"),
    ("date-for-window", M + "context_window = 2024-01-01", "models[2] 'x'", "context_window",
     "expected an integer, got a date/time"),
    ("string-timeout", P + "kind = 'demo'\ntimeout = 'fast'", "providers[1] 'p'", "timeout",
     "expected a number, got a string ('fast')"),
    ("bool-timeout", P + "kind = 'demo'\ntimeout = true", "providers[1] 'p'", "timeout",
     "expected a number, got a boolean (True)"),
    ("inf-cost", M + "cost_input = inf", "models[2] 'x'", "cost_input", "finite"),
    ("name-not-a-string", "[[models]]\nname = 7\nprovider = 'openai'", "models[2]", "name",
     "expected a string, got an integer (7)"),
    ("system-prompt-not-a-string", C + "model = 'small'\nsystem_prompt = ['hi']",
     "configurations[1] 'c'", "system_prompt", "expected a string, got an array"),
    ("unknown-kind-hint", P + "kind = 'antrophic'", "providers[1] 'p'", "kind",
     "(did you mean 'anthropic'?); expected 'openai', 'anthropic', 'gemini' or 'demo'"),
    ("kind-not-a-string", P + "kind = 1", "providers[1] 'p'", "kind",
     "expected 'openai', 'anthropic', 'gemini' or 'demo', got an integer (1)"),
    ("base-url-bad-port", P + "kind = 'openai'\nbase_url = 'http://x.test:99999/v1'",
     "providers[1] 'p'", "base_url", "'http://x.test:99999/v1' is not a valid URL"),
    ("base-url-no-host", P + "kind = 'openai'\nbase_url = 'http:///v1'", "providers[1] 'p'",
     "base_url", "'http:///v1' has no host"),
    ("trim-to-over-one", C + "model = 'small'\ntrim_to = 1.5", "configurations[1] 'c'",
     "trim_to", "must be at most 1, got 1.5"),
    ("trim-to-zero", C + "model = 'small'\ntrim_to = 0.0", "configurations[1] 'c'", "trim_to",
     "must be greater than 0, got 0"),
    ("max-output-with-demo-window", "[[providers]]\nname = 'd'\nkind = 'demo'\n[[models]]\n"
     "name = 'x'\nprovider = 'd'\nmax_output_tokens = 4096", "models[2] 'x'",
     "max_output_tokens", "less than context_window (2048)"),
    ("embed-name-empty", "[[embeds]]\nname = ''\nconfiguration = 'default'\n"
     "allowed_origins = ['https://a.test']", "embeds[0]", "name", "/embed/{name}"),
    ("origin-with-user", E + "allowed_origins = ['https://me@example.com']", "embeds[0] 'w'",
     "allowed_origins", "is not an origin (scheme://host[:port])"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("snippet", "entry", "field", "fragment"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_error_names_file_entry_and_field(
    tmp_path: Path, snippet: str, entry: str, field: str, fragment: str
) -> None:
    path, errors = errors_for(tmp_path, BASE + "\n" + snippet + "\n")
    assert_reported(errors, f"{path}: {entry}: field '{field}': ", fragment)


def test_api_key_in_api_key_env_is_refused_without_echoing_it(tmp_path: Path) -> None:
    secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    path, errors = errors_for(tmp_path, BASE.replace('"OPENAI_API_KEY"', f'"{secret}"'))
    line = assert_reported(
        errors, f"{path}: providers[0] 'openai': field 'api_key_env': ", "NAME of the environment"
    )
    assert "OPENAI_API_KEY" in line
    assert not any("sk-proj" in text for text in errors)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert "sk-proj" not in str(info.value)


def test_several_problems_of_one_value_are_one_line_each(tmp_path: Path) -> None:
    text = BASE + "\n" + E + "allowed_origins = ['*', 'ftp://a.test']\n"
    text = text.replace('"chat", "tools"]', '"chat", "vison", "tols"]')
    path, errors = errors_for(tmp_path, text)
    known = "expected 'chat', 'completion', 'embedding', 'tools' or 'vision'"
    assert errors == [
        f"{path}: models[0] 'small': field 'capabilities[1]': unknown capability 'vison' "
        f"(did you mean 'vision'?); {known}",
        f"{path}: models[0] 'small': field 'capabilities[2]': unknown capability 'tols' "
        f"(did you mean 'tools'?); {known}",
        f"{path}: embeds[0] 'w': field 'allowed_origins': '*': wildcards are not allowed; "
        "list each site that may embed the chat, such as 'https://example.com'",
        f"{path}: embeds[0] 'w': field 'allowed_origins': 'ftp://a.test' is not an origin: "
        "it must start with http:// or https://",
    ]


def test_specs_built_in_code_get_the_defaults_and_own_checks_but_no_references() -> None:
    """Only a file's entries are checked against each other; the rest holds for any spec."""
    assert ProviderSpec(name="a", kind="anthropic").base_url == "https://api.anthropic.com"
    assert ModelSpec(name="m", provider="nowhere").model_id == "m"
    assert ConfigurationSpec(name="c", model="nowhere", criteria=None).model == "nowhere"
    with pytest.raises(ValidationError, match="required: set 'model'"):
        ConfigurationSpec(name="c")
    with pytest.raises(ValidationError, match="not both"):
        ConfigurationSpec(name="c", model="m", criteria=Criteria())
    with pytest.raises(ValidationError, match="less than context_window"):
        ModelSpec(name="m", provider="p", context_window=100, max_output_tokens=100)


def test_data_that_is_not_a_table() -> None:
    with pytest.raises(CatalogError) as info:
        parse_catalog([1], "inline.toml")
    assert info.value.errors == ["inline.toml: top level: expected a table, got an array ([1])"]


def test_file_without_configurations_is_an_error(tmp_path: Path) -> None:
    text = BASE.split("[[configurations]]")[0]
    path, errors = errors_for(tmp_path, text)
    assert_reported(errors, f"{path}: top level: field 'configurations': ", "[[configurations]]")


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path, errors = errors_for(tmp_path, "")
    assert errors == [
        f"{path}: top level: field 'configurations': "
        "no [[configurations]]: declare at least one (the first is the default)"
    ]


def test_unknown_top_level_table(tmp_path: Path) -> None:
    path, errors = errors_for(tmp_path, BASE + "\n[[model]]\nname = 'x'\n")
    assert_reported(errors, f"{path}: top level: field 'model': ", "did you mean 'models'")


def test_section_that_is_not_an_array_of_tables() -> None:
    data = {"providers": "openai", "configurations": [{"name": "c", "model": "m"}]}
    with pytest.raises(CatalogError) as info:
        parse_catalog(data, "inline.toml")
    assert_reported(
        info.value.errors, "inline.toml: top level: field 'providers': ", "array of tables"
    )


def test_entry_that_is_not_a_table(tmp_path: Path) -> None:
    path, errors = errors_for(tmp_path, "embeds = [1]\n" + BASE)
    assert_reported(errors, f"{path}: embeds[0]: ", "expected a table ([[embeds]])")


def test_demo_provider_needs_no_base_url(tmp_path: Path) -> None:
    text = (
        BASE
        + "\n[[providers]]\nname = 'd'\nkind = 'demo'\n[[models]]\nname = 'x'\nprovider = 'd'\n"
    )
    catalog = load_catalog(write(tmp_path, text))
    assert catalog.providers["d"].base_url is None
    assert catalog.models["x"].context_window == DEMO_WINDOW


# --------------------------------------------------------------------------- all at once

MANY_MISTAKES = """
[[providers]]
name = "openai"
kind = "openia"
api_key_env = "sk-live-123"

[[models]]
name = "gpt-x"
provider = "opnai"
contxt_window = 128000
cost_input = -1

[[models]]
name = "gpt-x"
provider = "openai"
context_window = "big"

[[configurations]]
name = "chat"
model = "gpt-y"
fallbacks = ["nope"]

[[embeds]]
name = "w"
configuration = "chat"
allowed_origins = ["*"]
"""


def test_several_errors_are_all_reported(tmp_path: Path) -> None:
    path, errors = errors_for(tmp_path, MANY_MISTAKES)
    expected = [
        ("providers[0] 'openai'", "kind", "unknown provider kind 'openia'"),
        ("providers[0] 'openai'", "api_key_env", "variable name"),
        ("models[0] 'gpt-x'", "provider", "unknown provider 'opnai'"),
        ("models[0] 'gpt-x'", "contxt_window", "unknown key"),
        ("models[0] 'gpt-x'", "cost_input", "at least 0"),
        ("models[1] 'gpt-x'", "name", "duplicate name 'gpt-x'"),
        ("models[1] 'gpt-x'", "context_window", "expected an integer"),
        ("configurations[0] 'chat'", "model", "unknown model 'gpt-y'"),
        ("configurations[0] 'chat'", "fallbacks", "unknown model 'nope'"),
        ("embeds[0] 'w'", "allowed_origins", "wildcards"),
    ]
    for entry, field, fragment in expected:
        assert_reported(errors, f"{path}: {entry}: field '{field}': ", fragment)
    assert len(errors) == len(expected), "\n".join(errors)


def test_error_text_has_a_header_naming_the_file_then_every_line(tmp_path: Path) -> None:
    path = write(tmp_path, MANY_MISTAKES)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    header, *lines = str(info.value).splitlines()
    assert str(path) in header and "10 problems" in header
    assert lines == info.value.errors
    assert all(line.startswith(f"{path}: ") for line in lines)


def test_a_broken_model_does_not_cascade_into_its_configurations(tmp_path: Path) -> None:
    """One mistake, one message: a configuration naming a bad model is not also blamed."""
    text = BASE.replace("context_window = 16000", "context_window = '16k'")
    text += "\n[[configurations]]\nname = 'c'\ncriteria = { min_context_window = 100 }\n"
    path, errors = errors_for(tmp_path, text)
    assert errors == [
        f"{path}: models[0] 'small': field 'context_window': "
        "expected an integer, got a string ('16k')"
    ]


def test_one_entry_reports_each_place_once_in_order(tmp_path: Path) -> None:
    """Every problem of one entry, each at its own place, in the order of the fields."""
    text = BASE + (
        "\n[[configurations]]\nname = 'c'\nmax_tokens = 0\n"
        "criteria = { capabilities = ['chat', 2], min_context_window = 'big', "
        "max_cots_input = 1 }\n"
    )
    path, errors = errors_for(tmp_path, text)
    where = f"{path}: configurations[1] 'c': field"
    assert errors == [
        f"{where} 'criteria.capabilities[1]': expected 'chat', 'completion', 'embedding', "
        "'tools' or 'vision', got an integer (2)",
        f"{where} 'criteria.min_context_window': expected an integer, got a string ('big')",
        f"{where} 'criteria.max_cots_input': unknown key (did you mean 'max_cost_input'?)",
        f"{where} 'max_tokens': must be greater than 0, got 0",
    ]


def test_references_and_own_problems_are_in_the_order_of_the_fields(tmp_path: Path) -> None:
    text = BASE + (
        "\n[[models]]\nname = 'x'\ncost_input = -1\nprovider = 'opnai'\ncolour = 'red'\n"
        "[[configurations]]\nname = 'c'\nfallbacks = ['smal']\nmodel = 'bigg'\n"
    )
    path, errors = errors_for(tmp_path, text)
    model, configuration = f"{path}: models[2] 'x': field", f"{path}: configurations[1] 'c': field"
    assert [line.split(": ")[2] for line in errors] == [
        "field 'provider'",
        "field 'cost_input'",
        "field 'colour'",
        "field 'model'",
        "field 'fallbacks'",
    ]
    assert errors[0] == (
        f"{model} 'provider': unknown provider 'opnai' (did you mean 'openai'?); "
        "declare it in [[providers]]"
    )
    assert errors[4].startswith(f"{configuration} 'fallbacks': unknown model 'smal'")


# --------------------------------------------------------------------------- file problems


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    text = '[[providers]]\nname = "openai"\nkind = openai\n'
    path, errors = errors_for(tmp_path, text)
    assert len(errors) == 1
    assert errors[0].startswith(f"{path}: line 3: TOML syntax error: ")
    assert "(at line" not in errors[0]


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert info.value.errors == [f"{path}: file not found"]
    assert str(path) in str(info.value).splitlines()[0]


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    assert info.value.errors[0].startswith(f"{tmp_path}: ")


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[[configurations]]\nname = "caf\xe9"\n')
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert info.value.errors[0].startswith(f"{path}: not UTF-8")
