"""Providers, models, configurations and embeds, loaded from one TOML file.

The catalog is read once at start. A bad file must stop the app with a message
a person can act on, so validation never stops at the first problem: every
error line names the file, the entry (table, index from 0, and name when it has
one) and the field, and all of them are reported together.

When no file is configured the built-in catalog serves the offline demo model,
so a fresh checkout chats without any network or key.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast
from urllib.parse import urlsplit

DEFAULT_WINDOW = 8192
"""Window assumed for a model whose context_window is not given (DESIGN section 3)."""

DEMO_WINDOW = 2048
"""The demo model's window: small, so trimming becomes visible within minutes of use."""

KNOWN_CAPABILITIES = frozenset({"chat", "tools", "vision", "completion", "embedding"})
"""What routing can ask of a model. Anything else is a typo that would silently never match."""

PROVIDER_KINDS: tuple[str, ...] = ("openai", "demo")

TOKENIZER_KINDS: tuple[str, ...] = ("auto", "server", "estimate", "tiktoken", "huggingface")
"""How a model's tokens are counted: the first three stand alone, the last two take an
argument after a colon ("tiktoken:cl100k_base", "huggingface:path/to/tokenizer.json")."""

ProviderKind = Literal["openai", "demo"]


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """Where a model is served. The key itself never lives here, only its variable's name."""

    name: str
    kind: ProviderKind
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float = 60.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model as a provider serves it; `name` is ours, `model_id` is the provider's."""

    name: str
    provider: str
    model_id: str
    context_window: int | None = None
    max_output_tokens: int | None = None
    capabilities: frozenset[str] = frozenset()
    cost_input: float | None = None
    cost_output: float | None = None
    tokenizer: str = "auto"
    """The `tokenizer` setting, validated; a huggingface path is absolute."""

    @property
    def window(self) -> int:
        """The window the bound uses: an unknown window is assumed, never unbounded."""
        return self.context_window if self.context_window is not None else DEFAULT_WINDOW

    @property
    def known_cost(self) -> float | None:
        """Input plus output cost per million tokens, or None when either part is unknown."""
        if self.cost_input is None or self.cost_output is None:
            return None
        return self.cost_input + self.cost_output


@dataclass(frozen=True, slots=True)
class Criteria:
    """What a criteria configuration asks of a model; resolved per call, never stored."""

    capabilities: frozenset[str] = frozenset()
    min_context_window: int | None = None
    max_cost_input: float | None = None
    prefer_lowest_cost: bool = False

    def matches(self, model: ModelSpec) -> bool:
        """A model with unknown cost never passes a cost ceiling: we cannot promise it."""
        if not self.capabilities <= model.capabilities:
            return False
        if self.min_context_window is not None and model.window < self.min_context_window:
            return False
        if self.max_cost_input is None:
            return True
        return model.cost_input is not None and model.cost_input <= self.max_cost_input


@dataclass(frozen=True, slots=True)
class ConfigurationSpec:
    """What a user picks: a fixed model or criteria, plus prompt, reply size and fallbacks."""

    name: str
    model: str | None = None
    criteria: Criteria | None = None
    system_prompt: str | None = None
    max_tokens: int | None = None
    fallbacks: tuple[str, ...] = ()

    @property
    def is_fixed(self) -> bool:
        return self.model is not None


@dataclass(frozen=True, slots=True)
class EmbedSpec:
    """An iframe widget: which configuration it chats with and which sites may frame it."""

    name: str
    configuration: str
    allowed_origins: tuple[str, ...]
    title: str | None = None
    greeting: str | None = None


@dataclass(frozen=True, slots=True)
class Catalog:
    """Everything the file declares. Dicts keep file order, so "first" means first in the file."""

    providers: dict[str, ProviderSpec]
    models: dict[str, ModelSpec]
    configurations: dict[str, ConfigurationSpec]
    embeds: dict[str, EmbedSpec]
    source: str | None = None

    @property
    def default_configuration(self) -> str:
        """The first configuration: what a new conversation uses when none is asked for."""
        for name in self.configurations:
            return name
        raise LookupError("the catalog has no configurations")

    def candidates(self, criteria: Criteria) -> list[ModelSpec]:
        """Models matching `criteria`, best first, in an order that never depends on chance.

        Lowest cost first when asked (unknown cost last, since it may be anything);
        otherwise the largest window first, since a bigger window trims less.
        Ties break on the name.
        """
        matching = [model for model in self.models.values() if criteria.matches(model)]
        if criteria.prefer_lowest_cost:
            return sorted(matching, key=_cost_order)
        return sorted(matching, key=lambda model: (-model.window, model.name))


def split_tokenizer(setting: str) -> tuple[str, str]:
    """("tiktoken", "cl100k_base") from "tiktoken:cl100k_base"; ("auto", "") from "auto".

    The one place that reads a setting's shape, for the validator and the registry alike.
    """
    kind, _, argument = setting.partition(":")
    return kind, argument


def _cost_order(model: ModelSpec) -> tuple[bool, float, str]:
    cost = model.known_cost
    return (cost is None, cost if cost is not None else 0.0, model.name)


class CatalogError(Exception):
    """The catalog file is unusable. `errors` holds one line per problem, each naming the file."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = list(errors)
        count = len(self.errors)
        header = f"invalid catalog {source}: {count} problem{'' if count == 1 else 's'}"
        super().__init__("\n".join([header, *self.errors]))


# --------------------------------------------------------------------------- built-in


def builtin_catalog() -> Catalog:
    """The catalog used when no file is configured: the offline demo, nothing else."""
    provider = ProviderSpec(name="demo", kind="demo")
    model = ModelSpec(
        name="demo",
        provider="demo",
        model_id="demo",
        context_window=DEMO_WINDOW,
        max_output_tokens=256,
        capabilities=frozenset({"chat", "completion", "tools"}),
        tokenizer="estimate",
    )
    configuration = ConfigurationSpec(
        name="demo",
        model="demo",
        system_prompt=(
            "You are the offline demo model of a self-hosted chat app. "
            "Be brief and friendly, and say plainly that you are a demo."
        ),
    )
    return Catalog(
        providers={provider.name: provider},
        models={model.name: model},
        configurations={configuration.name: configuration},
        embeds={},
        source=None,
    )


# --------------------------------------------------------------------------- loading


def load_catalog(path: str | os.PathLike[str] | None) -> Catalog:
    """Read and validate a catalog file; None means the built-in demo catalog.

    Raises CatalogError for anything wrong, including a missing file and TOML
    syntax (with its line), so start-up has one kind of failure to report.
    """
    if path is None:
        return builtin_catalog()
    source = os.fspath(path)
    data = _read_toml(source)
    return parse_catalog(data, source)


def _read_toml(source: str) -> dict[str, Any]:
    try:
        raw = Path(source).read_bytes()
    except FileNotFoundError:
        raise CatalogError(source, [f"{source}: file not found"]) from None
    except IsADirectoryError:
        raise CatalogError(source, [f"{source}: is a directory, not a TOML file"]) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CatalogError(source, [f"{source}: cannot read file: {reason}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"{source}: not UTF-8 text (bad byte at offset {exc.start})"
        raise CatalogError(source, [message]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(source, [_syntax_error_line(source, exc)]) from None


_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$|\s*\(at end of document\)$")


def _syntax_error_line(source: str, exc: tomllib.TOMLDecodeError) -> str:
    """Name the line up front: tomllib (3.11) only tucks it at the end of its message."""
    message = str(getattr(exc, "msg", None) or exc)
    line: int | None = getattr(exc, "lineno", None)
    match = _AT_LINE.search(message)
    if match:
        message = message[: match.start()]
        if line is None and match.group(1):
            line = int(match.group(1))
    where = f"line {line}" if line is not None else "end of file"
    return f"{source}: {where}: TOML syntax error: {message}"


# --------------------------------------------------------------------------- field reading


_TOML_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a float",
    list: "an array",
    dict: "a table",
}


def _describe(value: Any) -> str:
    """Say what was found in TOML's words, with the value when short, so the fix is obvious."""
    kind = _TOML_TYPE_NAMES.get(type(value), "a date/time")
    shown = repr(value)
    return f"{kind} ({shown})" if len(shown) <= 40 else kind


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Problems:
    """Collects error lines for one file so validation can go on after the first problem."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.lines.append(f"{self.source}: {where}: {message}")


class _Table:
    """Typed reads from one TOML table that report problems instead of raising.

    Each read returns None when the value is absent or wrong, and marks the
    entry as not ok, so cross-checks can skip entries that already failed
    rather than pile consequential errors on top.
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        where: str,
        problems: _Problems,
        allowed: Iterable[str],
        prefix: str = "",
    ) -> None:
        self.data = data
        self.where = where
        self.problems = problems
        self.prefix = prefix
        self.ok = True
        allowed = tuple(allowed)
        for key in data:
            if key not in allowed:
                self.error(key, f"unknown key{_did_you_mean(key, allowed)}")

    def error(self, key: str, message: str) -> None:
        self.ok = False
        self.problems.add(f"{self.where}: field '{self.prefix}{key}'", message)

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                self.error(key, "required field is missing")
            return None
        return self.data[key]

    def string(self, key: str, *, required: bool = False, allow_empty: bool = False) -> str | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            self.error(key, f"expected a string, got {_describe(value)}")
            return None
        if not allow_empty and not value.strip():
            self.error(key, "must not be empty")
            return None
        return value

    def integer(self, key: str, *, required: bool = False) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, f"expected an integer, got {_describe(value)}")
            return None
        return value

    def positive_integer(self, key: str, *, required: bool = False) -> int | None:
        value = self.integer(key, required=required)
        if value is not None and value <= 0:
            self.error(key, f"must be greater than 0, got {value}")
            return None
        return value

    def number(self, key: str, *, minimum: float, inclusive: bool) -> float | None:
        """A finite int or float no lower than `minimum` (strictly above when not inclusive)."""
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(key, f"expected a number, got {_describe(value)}")
            return None
        if not math.isfinite(value):
            self.error(key, f"must be a finite number, got {value}")
            return None
        if value < minimum or (not inclusive and value == minimum):
            bound = "at least" if inclusive else "greater than"
            self.error(key, f"must be {bound} {minimum:g}, got {value:g}")
            return None
        return float(value)

    def boolean(self, key: str) -> bool | None:
        value = self._get(key, False)
        if value is None:
            return None
        if not isinstance(value, bool):
            self.error(key, f"expected true or false, got {_describe(value)}")
            return None
        return value

    def strings(self, key: str, *, required: bool = False) -> tuple[str, ...] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list):
            self.error(key, f"expected an array of strings, got {_describe(value)}")
            return None
        bad = [item for item in value if not isinstance(item, str) or not item.strip()]
        if bad:
            self.error(key, f"expected non-empty strings, got {_describe(bad[0])}")
            return None
        return tuple(value)

    def capabilities(self, key: str) -> frozenset[str] | None:
        values = self.strings(key)
        if values is None:
            return None
        unknown = [value for value in values if value not in KNOWN_CAPABILITIES]
        for value in unknown:
            known = ", ".join(sorted(KNOWN_CAPABILITIES))
            hint = _did_you_mean(value, KNOWN_CAPABILITIES)
            self.error(key, f"unknown capability '{value}'{hint}; known: {known}")
        return None if unknown else frozenset(values)


# --------------------------------------------------------------------------- sections


_SECTIONS = ("providers", "models", "configurations", "embeds")

_PROVIDER_KEYS = ("name", "kind", "base_url", "api_key_env", "timeout")
_MODEL_KEYS = (
    "name",
    "provider",
    "model_id",
    "context_window",
    "max_output_tokens",
    "capabilities",
    "cost_input",
    "cost_output",
    "tokenizer",
)
_CONFIGURATION_KEYS = ("name", "model", "criteria", "system_prompt", "max_tokens", "fallbacks")
_CRITERIA_KEYS = ("capabilities", "min_context_window", "max_cost_input", "prefer_lowest_cost")
_EMBED_KEYS = ("name", "configuration", "allowed_origins", "title", "greeting")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EMBED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_S = TypeVar("_S")


@dataclass
class _Section(Generic[_S]):
    """One [[table]] array: its valid specs, and every name declared even by a broken entry.

    References are checked against `declared` so that one bad model yields one
    error, not another "unknown model" for each configuration that names it.
    """

    specs: dict[str, _S] = field(default_factory=dict)
    declared: dict[str, str] = field(default_factory=dict)
    count: int = 0
    broken: bool = False


def _section(
    data: Mapping[str, Any],
    section: str,
    allowed: tuple[str, ...],
    problems: _Problems,
    build: Callable[[_Table, str | None], _S | None],
) -> _Section[_S]:
    """Check each entry's shape, name and uniqueness, then let `build` read the rest.

    `build` gets the entry's reader and its name (None when the name is bad) and
    returns a spec; the spec is kept only if no field of the entry was wrong.
    """
    result: _Section[_S] = _Section()
    value = data.get(section, [])
    if not isinstance(value, list):
        problems.add(
            f"top level: field '{section}'",
            f"expected an array of tables ([[{section}]]), got {_describe(value)}",
        )
        result.broken = True
        return result
    result.count = len(value)
    for index, entry in enumerate(value):
        label = f"{section}[{index}]"
        if not isinstance(entry, dict):
            problems.add(label, f"expected a table ([[{section}]]), got {_describe(entry)}")
            result.broken = True
            continue
        raw_name = entry.get("name")
        if isinstance(raw_name, str) and raw_name.strip():
            label = f"{label} '{raw_name}'"
        table = _Table(entry, label, problems, allowed)
        name = table.string("name", required=True)
        if name is not None:
            if name in result.declared:
                first = result.declared[name]
                table.error("name", f"duplicate name '{name}' (already used by {first})")
            else:
                result.declared[name] = label
        spec = build(table, name)
        if table.ok and spec is not None and name is not None:
            result.specs[name] = spec
        else:
            result.broken = True
    return result


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return f"'{url}' is not a valid URL"
    if parts.scheme not in ("http", "https"):
        return f"must be an http:// or https:// URL, got '{url}'"
    if not parts.hostname:
        return f"'{url}' has no host"
    return None


def _origin_problem(origin: str) -> str | None:
    """An origin is exactly scheme://host[:port]: what a browser compares for frame-ancestors."""
    if "*" in origin:
        return (
            f"'{origin}': wildcards are not allowed; list each site that may embed the chat, "
            "such as 'https://example.com'"
        )
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return f"'{origin}' is not an origin (scheme://host[:port])"
    if parts.scheme not in ("http", "https"):
        return f"'{origin}' is not an origin: it must start with http:// or https://"
    if not parts.hostname or parts.username is not None or any(c.isspace() for c in origin):
        return f"'{origin}' is not an origin (scheme://host[:port])"
    expected = f"{parts.scheme}://{parts.netloc}"
    if origin.lower() != expected.lower():
        return f"'{origin}' is not an origin: drop the path, query or fragment and use '{expected}'"
    return None


# --------------------------------------------------------------------------- builders


def _provider(table: _Table, name: str | None) -> ProviderSpec | None:
    kind = table.string("kind", required=True)
    if kind is not None and kind not in PROVIDER_KINDS:
        expected = " or ".join(f"'{k}'" for k in PROVIDER_KINDS)
        table.error(
            "kind",
            f"unknown provider kind '{kind}'{_did_you_mean(kind, PROVIDER_KINDS)}; "
            f"expected {expected}",
        )
        kind = None
    base_url = table.string("base_url")
    if base_url is not None:
        problem = _url_problem(base_url)
        if problem:
            table.error("base_url", problem)
        base_url = base_url.rstrip("/")
    elif kind == "openai" and "base_url" not in table.data:
        table.error(
            "base_url",
            "required for an 'openai' provider (e.g. https://api.openai.com/v1 "
            "or http://127.0.0.1:11434/v1 for Ollama)",
        )
    api_key_env = table.string("api_key_env")
    if api_key_env is not None:
        _check_api_key_env(table, api_key_env)
    timeout = table.number("timeout", minimum=0.0, inclusive=False)
    if name is None or kind is None:
        return None
    return ProviderSpec(
        name=name,
        kind=cast(ProviderKind, kind),
        base_url=base_url,
        api_key_env=api_key_env,
        timeout=timeout if timeout is not None else 60.0,
    )


def _check_api_key_env(table: _Table, value: str) -> None:
    """The file names the variable; the key stays in the environment, out of files and logs.

    The value is never echoed: if it is a secret, the error message must not leak it.
    """
    hint = 'put the NAME of the environment variable there (e.g. api_key_env = "OPENAI_API_KEY")'
    if value.startswith("sk-"):
        table.error(
            "api_key_env",
            f"looks like an API key itself, not a variable name; {hint} "
            "and set that variable to the key",
        )
    elif not _ENV_NAME.fullmatch(value):
        table.error("api_key_env", f"is not an environment variable name; {hint}")


def _model(
    providers: _Section[ProviderSpec], folder: Path, table: _Table, name: str | None
) -> ModelSpec | None:
    provider = table.string("provider", required=True)
    if provider is not None and provider not in providers.declared:
        hint = _did_you_mean(provider, providers.declared)
        table.error("provider", f"unknown provider '{provider}'{hint}; declare it in [[providers]]")
    model_id = table.string("model_id")
    context_window = table.positive_integer("context_window")
    served_by = providers.specs.get(provider) if provider is not None else None
    if "context_window" not in table.data and served_by is not None and served_by.kind == "demo":
        context_window = DEMO_WINDOW
    max_output_tokens = table.positive_integer("max_output_tokens")
    # A window left out is discovered from the server after loading (webapp.llm.discovery),
    # which checks max_output_tokens against it then; here only a known window is checked.
    if (
        max_output_tokens is not None
        and context_window is not None
        and max_output_tokens >= context_window
    ):
        table.error(
            "max_output_tokens",
            f"{max_output_tokens} must be less than context_window ({context_window}): "
            "the reply would leave no room for the prompt",
        )
    capabilities = table.capabilities("capabilities")
    if capabilities is not None and not capabilities:
        table.error("capabilities", 'must list at least one capability (default is ["chat"])')
    if "capabilities" not in table.data:
        capabilities = frozenset({"chat"})
    cost_input = table.number("cost_input", minimum=0.0, inclusive=True)
    cost_output = table.number("cost_output", minimum=0.0, inclusive=True)
    tokenizer = _tokenizer(table, served_by, folder)
    if name is None or provider is None or capabilities is None or tokenizer is None:
        return None
    return ModelSpec(
        name=name,
        provider=provider,
        model_id=model_id if model_id is not None else name,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        capabilities=capabilities,
        cost_input=cost_input,
        cost_output=cost_output,
        tokenizer=tokenizer,
    )


def _tokenizer(table: _Table, served_by: ProviderSpec | None, folder: Path) -> str | None:
    """The validated `tokenizer` setting, or None (with an error) when it cannot work.

    Checked here, at start, rather than at the first send: a missing package or file
    should stop the app with the entry named, not quietly count with the estimate.
    """
    demo = served_by is not None and served_by.kind == "demo"
    if "tokenizer" not in table.data:
        return "estimate" if demo else "auto"
    setting = table.string("tokenizer")
    if setting is None:
        return None
    kind, argument = split_tokenizer(setting.strip())
    examples = "'auto', 'server', 'estimate', 'tiktoken:<encoding>' or 'huggingface:<path>'"
    if kind not in TOKENIZER_KINDS:
        hint = _did_you_mean(kind, TOKENIZER_KINDS)
        table.error("tokenizer", f"unknown tokenizer '{setting}'{hint}; expected {examples}")
        return None
    if kind in ("auto", "server", "estimate"):
        if argument:
            table.error("tokenizer", f"'{kind}' takes no argument, got '{setting}'")
            return None
        if kind == "server" and demo:
            table.error("tokenizer", "the demo provider has no tokenize endpoint; use 'estimate'")
            return None
        return kind
    if not argument.strip():
        what = (
            "an encoding, e.g. 'tiktoken:cl100k_base'"
            if kind == "tiktoken"
            else ("the path of a tokenizer.json, e.g. 'huggingface:models/qwen/tokenizer.json'")
        )
        table.error("tokenizer", f"'{kind}:' needs {what}")
        return None
    if kind == "tiktoken":
        problem = _tiktoken_problem(argument)
        if problem:
            table.error("tokenizer", problem)
            return None
        return setting
    if importlib.util.find_spec("tokenizers") is None:
        table.error(
            "tokenizer",
            "needs the 'tokenizers' package, which is not installed: "
            "pip install 'webapp[huggingface]'",
        )
        return None
    path = Path(argument).expanduser()
    path = (path if path.is_absolute() else folder / path).resolve()
    if not path.is_file():
        table.error("tokenizer", f"tokenizer file not found: {path}")
        return None
    return f"huggingface:{path}"


def _tiktoken_problem(encoding: str) -> str | None:
    """Why `encoding` cannot be used, or None. Only names are checked here (no download);
    the registry loads the vocabulary."""
    if importlib.util.find_spec("tiktoken") is None:
        return (
            "needs the 'tiktoken' package, which is not installed: pip install 'webapp[tiktoken]'"
        )
    import tiktoken

    known = [name for name in tiktoken.list_encoding_names() if not name.endswith("_offline")]
    if encoding not in known:
        hint = _did_you_mean(encoding, known)
        return f"unknown tiktoken encoding '{encoding}'{hint}; known: {', '.join(known)}"
    return None


def _configuration(
    models: _Section[ModelSpec], table: _Table, name: str | None
) -> ConfigurationSpec | None:
    has_model, has_criteria = "model" in table.data, "criteria" in table.data
    if has_model and has_criteria:
        table.error("model", "set either 'model' (a fixed model) or 'criteria', not both")
    elif not has_model and not has_criteria:
        table.error(
            "model",
            "required: set 'model' (a fixed model) or 'criteria' (a model chosen per call)",
        )
    model = table.string("model")
    if model is not None and model not in models.declared:
        table.error(
            "model",
            f"unknown model '{model}'{_did_you_mean(model, models.declared)}; "
            "declare it in [[models]]",
        )
    criteria = _criteria(table) if has_criteria else None
    if criteria is not None and not models.broken and not _any_match(models, criteria):
        table.error("criteria", f"no model in [[models]] matches {_describe_criteria(criteria)}")
    max_tokens = table.positive_integer("max_tokens")
    fixed = models.specs.get(model) if model is not None else None
    if (
        max_tokens is not None
        and fixed is not None
        and fixed.context_window is not None
        and max_tokens >= fixed.window
    ):
        table.error(
            "max_tokens",
            f"{max_tokens} must be less than the window of model '{fixed.name}' ({fixed.window}): "
            "the reply would leave no room for the prompt",
        )
    fallbacks = table.strings("fallbacks")
    if fallbacks is not None:
        _check_fallbacks(table, models, fallbacks, model, max_tokens)
    system_prompt = table.string("system_prompt", allow_empty=True)
    if name is None or (model is None and criteria is None):
        return None
    return ConfigurationSpec(
        name=name,
        model=model,
        criteria=criteria,
        system_prompt=system_prompt,
        max_tokens=max_tokens,
        fallbacks=fallbacks or (),
    )


def _criteria(parent: _Table) -> Criteria | None:
    """Read the inline criteria table; its problems count against the configuration."""
    value = parent.data["criteria"]
    if not isinstance(value, dict):
        parent.error(
            "criteria",
            f'expected a table such as {{ capabilities = ["chat"] }}, got {_describe(value)}',
        )
        return None
    table = _Table(value, parent.where, parent.problems, _CRITERIA_KEYS, prefix="criteria.")
    capabilities = table.capabilities("capabilities")
    min_context_window = table.positive_integer("min_context_window")
    max_cost_input = table.number("max_cost_input", minimum=0.0, inclusive=True)
    prefer_lowest_cost = table.boolean("prefer_lowest_cost")
    if not table.ok:
        parent.ok = False
        return None
    return Criteria(
        capabilities=capabilities or frozenset(),
        min_context_window=min_context_window,
        max_cost_input=max_cost_input,
        prefer_lowest_cost=bool(prefer_lowest_cost),
    )


def _any_match(models: _Section[ModelSpec], criteria: Criteria) -> bool:
    return any(criteria.matches(model) for model in models.specs.values())


def _describe_criteria(criteria: Criteria) -> str:
    parts = []
    if criteria.capabilities:
        parts.append(f"capabilities {sorted(criteria.capabilities)}")
    if criteria.min_context_window is not None:
        parts.append(f"min_context_window {criteria.min_context_window}")
    if criteria.max_cost_input is not None:
        parts.append(f"max_cost_input {criteria.max_cost_input:g} (unknown cost never matches)")
    return ", ".join(parts) if parts else "these criteria"


def _check_fallbacks(
    table: _Table,
    models: _Section[ModelSpec],
    fallbacks: tuple[str, ...],
    model: str | None,
    max_tokens: int | None,
) -> None:
    """Each fallback must be a declared model that can still hold a prompt after the reply."""
    seen: set[str] = set()
    for fallback in fallbacks:
        if fallback not in models.declared:
            hint = _did_you_mean(fallback, models.declared)
            table.error("fallbacks", f"unknown model '{fallback}'{hint}; declare it in [[models]]")
        elif fallback in seen:
            table.error("fallbacks", f"model '{fallback}' is listed twice")
        elif fallback == model:
            table.error("fallbacks", f"model '{fallback}' is the configuration's own model")
        else:
            spec = models.specs.get(fallback)
            known = spec is not None and spec.context_window is not None
            if spec is not None and known and max_tokens is not None and max_tokens >= spec.window:
                table.error(
                    "fallbacks",
                    f"model '{fallback}' has a window of {spec.window}, not more than "
                    f"max_tokens {max_tokens}",
                )
        seen.add(fallback)


def _embed(
    configurations: _Section[ConfigurationSpec], table: _Table, name: str | None
) -> EmbedSpec | None:
    if name is not None and not _EMBED_NAME.fullmatch(name):
        table.error(
            "name",
            f"'{name}' is used in the URL /embed/{{name}}: use only letters, "
            "digits, '.', '_' and '-'",
        )
    configuration = table.string("configuration", required=True)
    if configuration is not None and configuration not in configurations.declared:
        hint = _did_you_mean(configuration, configurations.declared)
        table.error(
            "configuration",
            f"unknown configuration '{configuration}'{hint}; declare it in [[configurations]]",
        )
    origins = table.strings("allowed_origins", required=True)
    if origins is not None and not origins:
        table.error(
            "allowed_origins", "must list at least one origin, such as 'https://example.com'"
        )
    for origin in origins or ():
        problem = _origin_problem(origin)
        if problem:
            table.error("allowed_origins", problem)
    title = table.string("title")
    greeting = table.string("greeting", allow_empty=True)
    if name is None or configuration is None or origins is None:
        return None
    return EmbedSpec(
        name=name,
        configuration=configuration,
        allowed_origins=origins,
        title=title,
        greeting=greeting,
    )


# --------------------------------------------------------------------------- the whole file


def parse_catalog(data: dict[str, Any], source: str) -> Catalog:
    """Validate already-parsed TOML; raise CatalogError listing every problem found.

    Sections are read in dependency order (providers, models, configurations,
    embeds) so each can check its references against the one before.
    """
    problems = _Problems(source)
    if not isinstance(data, dict):
        problems.add("top level", f"expected a table, got {_describe(data)}")
        raise CatalogError(source, problems.lines)
    for key in data:
        if key not in _SECTIONS:
            problems.add(
                f"top level: field '{key}'",
                f"unknown key{_did_you_mean(key, _SECTIONS)}; "
                "expected [[providers]], [[models]], [[configurations]] or [[embeds]]",
            )
    providers = _section(data, "providers", _PROVIDER_KEYS, problems, _provider)
    folder = Path(source).resolve().parent
    models = _section(data, "models", _MODEL_KEYS, problems, partial(_model, providers, folder))
    configurations = _section(
        data, "configurations", _CONFIGURATION_KEYS, problems, partial(_configuration, models)
    )
    embeds = _section(data, "embeds", _EMBED_KEYS, problems, partial(_embed, configurations))
    if configurations.count == 0 and isinstance(data.get("configurations", []), list):
        problems.add(
            "top level: field 'configurations'",
            "no [[configurations]]: declare at least one (the first is the default)",
        )
    if problems.lines:
        raise CatalogError(source, problems.lines)
    return Catalog(
        providers=providers.specs,
        models=models.specs,
        configurations=configurations.specs,
        embeds=embeds.specs,
        source=source,
    )
