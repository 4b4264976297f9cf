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
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

DEFAULT_WINDOW = 8192
"""Window assumed for a model whose context_window is not given (docs/design.md section 3)."""

DEMO_WINDOW = 2048
"""The demo model's window: small, so trimming becomes visible within minutes of use."""

DEFAULT_TRIM_TO = 0.75
"""A moved cut leaves the prompt at this share of the budget: room for several more sends
that are pure appends (the engine's prompt cache serves all but the new turn)."""

KNOWN_CAPABILITIES = frozenset({"chat", "tools", "vision", "completion", "embedding"})
"""What routing can ask of a model. Anything else is a typo that would silently never match."""

PROVIDER_KINDS: tuple[str, ...] = ("openai", "anthropic", "gemini", "demo")

VENDOR_ROOTS: dict[str, str] = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}
"""Where a native provider is served when its `base_url` is left out: the vendor's root,
as the vendor's SDK takes it (the provider adds the API's paths)."""

TOKENIZER_KINDS: tuple[str, ...] = ("auto", "server", "estimate", "tiktoken", "huggingface")
"""How a model's tokens are counted: the first three stand alone, the last two take an
argument after a colon ("tiktoken:cl100k_base", "huggingface:path/to/tokenizer.json")."""

ProviderKind = Literal["openai", "anthropic", "gemini", "demo"]


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
    trim_to: float = DEFAULT_TRIM_TO
    """Where a cut that has to move goes: the share of the budget the prompt may use
    after it (see `webapp.llm.window`)."""

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
    show_internals: bool = False
    """Whether visitors see token counts and the model's and configuration's names (the
    meter's figures, each trimmed turn's facts, the badge): off unless the site asks."""


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


# --------------------------------------------------------------------------- the file's shape
#
# Each [[table]] entry is a pydantic model: pydantic checks types, ranges, required and
# unknown keys, and reports every problem of an entry at once with its location. Checks
# that need the sections before (a model's provider, a configuration's models) run as
# field validators reading `_Known` from the validation context, so an entry's reference
# errors come out with its type errors. `_lines` turns pydantic's errors into our lines.


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


_REFUSED = "catalog"
"""The error type of every check written here; its messages are shown as they are."""


def _refuse(*messages: str) -> PydanticCustomError:
    """One field's problems (one or more lines) as a pydantic error."""
    return PydanticCustomError(_REFUSED, "{message}", {"message": messages[0], "all": messages})


def _not_blank(value: str) -> str:
    if not value.strip():
        raise _refuse("must not be empty")
    return value


Text = Annotated[str, AfterValidator(_not_blank)]
"""A string with something in it: an empty name or URL is a mistake, not a value."""
Count = Annotated[int, Field(gt=0)]
Cost = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _known_capabilities(values: list[str]) -> list[str]:
    known = ", ".join(sorted(KNOWN_CAPABILITIES))
    unknown = [
        f"unknown capability '{value}'{_did_you_mean(value, KNOWN_CAPABILITIES)}; known: {known}"
        for value in values
        if value not in KNOWN_CAPABILITIES
    ]
    if unknown:
        raise _refuse(*unknown)
    return values


Capabilities = Annotated[list[Text], AfterValidator(_known_capabilities)]


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


@dataclass
class _Known:
    """What the sections read so far declare, for the references of the next one."""

    folder: Path
    """Where the file is: a relative tokenizer path is read from there."""
    providers: _Section[ProviderSpec] = field(default_factory=_Section)
    models: _Section[ModelSpec] = field(default_factory=_Section)
    configurations: _Section[ConfigurationSpec] = field(default_factory=_Section)


def _known(info: ValidationInfo) -> _Known:
    return cast(_Known, cast(dict[str, Any], info.context)["known"])


class _Table(BaseModel):
    """Strict: TOML has real types, so "8k", 4096.0 or "yes" is a mistake to name, not a
    value to coerce; and a key no entry knows is a typo that would silently do nothing."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _Entry(_Table):
    name: Text

    @classmethod
    def presence_problems(cls, data: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(field, message) for rules on which keys are present, which pydantic has no
        per-field place for; checked on the raw entry, alongside pydantic's errors."""
        return []

    def spec(self) -> Any:
        """The frozen spec the rest of the app reads."""
        raise NotImplementedError


class _ProviderEntry(_Entry):
    kind: str
    base_url: Text | None = Field(default=None, validate_default=True)
    api_key_env: Text | None = None
    timeout: Seconds = 60.0

    @field_validator("kind")
    @classmethod
    def _kind(cls, kind: str) -> str:
        if kind not in PROVIDER_KINDS:
            expected = " or ".join(f"'{k}'" for k in PROVIDER_KINDS)
            hint = _did_you_mean(kind, PROVIDER_KINDS)
            raise _refuse(f"unknown provider kind '{kind}'{hint}; expected {expected}")
        return kind

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, base_url: str | None, info: ValidationInfo) -> str | None:
        if base_url is None:
            if info.data.get("kind") in VENDOR_ROOTS:
                return VENDOR_ROOTS[info.data["kind"]]
            if info.data.get("kind") == "openai":
                raise _refuse(
                    "required for an 'openai' provider (e.g. https://api.openai.com/v1 "
                    "or http://127.0.0.1:11434/v1 for Ollama)"
                )
            return None
        problem = _url_problem(base_url)
        if problem:
            raise _refuse(problem)
        return base_url.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env(cls, value: str | None) -> str | None:
        if value is not None:
            _check_api_key_env(value)
        return value

    def spec(self) -> ProviderSpec:
        return ProviderSpec(
            name=self.name,
            kind=cast(ProviderKind, self.kind),
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            timeout=self.timeout,
        )


class _ModelEntry(_Entry):
    provider: Text
    model_id: Text | None = None
    context_window: Count | None = Field(default=None, validate_default=True)
    max_output_tokens: Count | None = None
    capabilities: Capabilities = Field(default_factory=lambda: ["chat"])
    cost_input: Cost | None = None
    cost_output: Cost | None = None
    tokenizer: Text | None = Field(default=None, validate_default=True)

    @field_validator("provider")
    @classmethod
    def _provider(cls, provider: str, info: ValidationInfo) -> str:
        declared = _known(info).providers.declared
        if provider not in declared:
            hint = _did_you_mean(provider, declared)
            raise _refuse(f"unknown provider '{provider}'{hint}; declare it in [[providers]]")
        return provider

    @field_validator("context_window")
    @classmethod
    def _context_window(cls, window: int | None, info: ValidationInfo) -> int | None:
        """Left out, a demo model gets the demo's window; any other model's is discovered
        from its server after loading (webapp.llm.discovery)."""
        if window is None and _served_by_demo(info):
            return DEMO_WINDOW
        return window

    @field_validator("max_output_tokens")
    @classmethod
    def _max_output_tokens(cls, most: int | None, info: ValidationInfo) -> int | None:
        # An unknown window is checked against max_output_tokens once discovered.
        window = info.data.get("context_window")
        if most is not None and window is not None and most >= window:
            raise _refuse(
                f"{most} must be less than context_window ({window}): "
                "the reply would leave no room for the prompt"
            )
        return most

    @field_validator("capabilities")
    @classmethod
    def _capabilities(cls, capabilities: list[str]) -> list[str]:
        if not capabilities:
            raise _refuse('must list at least one capability (default is ["chat"])')
        return capabilities

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, setting: str | None, info: ValidationInfo) -> str:
        return _tokenizer(setting, demo=_served_by_demo(info), folder=_known(info).folder)

    def spec(self) -> ModelSpec:
        return ModelSpec(
            name=self.name,
            provider=self.provider,
            model_id=self.model_id if self.model_id is not None else self.name,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            capabilities=frozenset(self.capabilities),
            cost_input=self.cost_input,
            cost_output=self.cost_output,
            tokenizer=cast(str, self.tokenizer),
        )


def _served_by_demo(info: ValidationInfo) -> bool:
    provider = _known(info).providers.specs.get(info.data.get("provider", ""))
    return provider is not None and provider.kind == "demo"


def _tokenizer(setting: str | None, *, demo: bool, folder: Path) -> str:
    """The validated `tokenizer` setting; left out, the estimate for the demo, else "auto".

    Checked here, at start, rather than at the first send: a missing package or file
    should stop the app with the entry named, not quietly count with the estimate.
    """
    if setting is None:
        return "estimate" if demo else "auto"
    kind, argument = split_tokenizer(setting.strip())
    examples = "'auto', 'server', 'estimate', 'tiktoken:<encoding>' or 'huggingface:<path>'"
    if kind not in TOKENIZER_KINDS:
        hint = _did_you_mean(kind, TOKENIZER_KINDS)
        raise _refuse(f"unknown tokenizer '{setting}'{hint}; expected {examples}")
    if kind in ("auto", "server", "estimate"):
        if argument:
            raise _refuse(f"'{kind}' takes no argument, got '{setting}'")
        if kind == "server" and demo:
            raise _refuse("the demo provider has no tokenize endpoint; use 'estimate'")
        return kind
    if not argument.strip():
        what = (
            "an encoding, e.g. 'tiktoken:cl100k_base'"
            if kind == "tiktoken"
            else "the path of a tokenizer.json, e.g. 'huggingface:models/qwen/tokenizer.json'"
        )
        raise _refuse(f"'{kind}:' needs {what}")
    if kind == "tiktoken":
        problem = _tiktoken_problem(argument)
        if problem:
            raise _refuse(problem)
        return setting
    if importlib.util.find_spec("tokenizers") is None:
        raise _refuse(
            "needs the 'tokenizers' package, which is not installed: "
            "pip install 'webapp[huggingface]'"
        )
    path = Path(argument).expanduser()
    path = (path if path.is_absolute() else folder / path).resolve()
    if not path.is_file():
        raise _refuse(f"tokenizer file not found: {path}")
    return f"huggingface:{path}"


class _CriteriaTable(_Table):
    capabilities: Capabilities = Field(default_factory=list)
    min_context_window: Count | None = None
    max_cost_input: Cost | None = None
    prefer_lowest_cost: bool = False

    def spec(self) -> Criteria:
        return Criteria(
            capabilities=frozenset(self.capabilities),
            min_context_window=self.min_context_window,
            max_cost_input=self.max_cost_input,
            prefer_lowest_cost=self.prefer_lowest_cost,
        )


class _ConfigurationEntry(_Entry):
    model: Text | None = None
    criteria: _CriteriaTable | None = None
    system_prompt: str | None = None
    max_tokens: Count | None = None
    fallbacks: list[Text] = Field(default_factory=list)
    trim_to: float = Field(default=DEFAULT_TRIM_TO, gt=0, le=1, allow_inf_nan=False)

    @classmethod
    def presence_problems(cls, data: Mapping[str, Any]) -> list[tuple[str, str]]:
        if "model" in data and "criteria" in data:
            return [("model", "set either 'model' (a fixed model) or 'criteria', not both")]
        if "model" not in data and "criteria" not in data:
            return [
                (
                    "model",
                    "required: set 'model' (a fixed model) or 'criteria' (a model chosen per call)",
                )
            ]
        return []

    @field_validator("model")
    @classmethod
    def _model(cls, model: str | None, info: ValidationInfo) -> str | None:
        declared = _known(info).models.declared
        if model is not None and model not in declared:
            hint = _did_you_mean(model, declared)
            raise _refuse(f"unknown model '{model}'{hint}; declare it in [[models]]")
        return model

    @field_validator("criteria")
    @classmethod
    def _criteria(
        cls, criteria: _CriteriaTable | None, info: ValidationInfo
    ) -> _CriteriaTable | None:
        """Checked only when every model is valid: a broken one might have matched."""
        models = _known(info).models
        if criteria is None or models.broken:
            return criteria
        wanted = criteria.spec()
        if not any(wanted.matches(model) for model in models.specs.values()):
            raise _refuse(f"no model in [[models]] matches {_describe_criteria(wanted)}")
        return criteria

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens(cls, max_tokens: int | None, info: ValidationInfo) -> int | None:
        fixed = _known(info).models.specs.get(info.data.get("model") or "")
        if (
            max_tokens is not None
            and fixed is not None
            and fixed.context_window is not None
            and max_tokens >= fixed.window
        ):
            raise _refuse(
                f"{max_tokens} must be less than the window of model '{fixed.name}' "
                f"({fixed.window}): the reply would leave no room for the prompt"
            )
        return max_tokens

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks(cls, fallbacks: list[str], info: ValidationInfo) -> list[str]:
        """Each fallback must be a declared model that can still hold a prompt after the
        reply."""
        models = _known(info).models
        model, max_tokens = info.data.get("model"), info.data.get("max_tokens")
        problems: list[str] = []
        for index, fallback in enumerate(fallbacks):
            spec = models.specs.get(fallback)
            if fallback not in models.declared:
                hint = _did_you_mean(fallback, models.declared)
                problems.append(f"unknown model '{fallback}'{hint}; declare it in [[models]]")
            elif fallback in fallbacks[:index]:
                problems.append(f"model '{fallback}' is listed twice")
            elif fallback == model:
                problems.append(f"model '{fallback}' is the configuration's own model")
            elif (
                spec is not None
                and spec.context_window is not None
                and max_tokens is not None
                and max_tokens >= spec.window
            ):
                problems.append(
                    f"model '{fallback}' has a window of {spec.window}, not more than "
                    f"max_tokens {max_tokens}"
                )
        if problems:
            raise _refuse(*problems)
        return fallbacks

    def spec(self) -> ConfigurationSpec:
        return ConfigurationSpec(
            name=self.name,
            model=self.model,
            criteria=self.criteria.spec() if self.criteria is not None else None,
            system_prompt=self.system_prompt,
            max_tokens=self.max_tokens,
            fallbacks=tuple(self.fallbacks),
            trim_to=self.trim_to,
        )


class _EmbedEntry(_Entry):
    configuration: Text
    allowed_origins: list[Text]
    title: Text | None = None
    greeting: str | None = None
    show_internals: bool = False

    @field_validator("name")
    @classmethod
    def _url_safe_name(cls, name: str) -> str:
        if not _EMBED_NAME.fullmatch(name):
            raise _refuse(
                f"'{name}' is used in the URL /embed/{{name}}: use only letters, "
                "digits, '.', '_' and '-'"
            )
        return name

    @field_validator("configuration")
    @classmethod
    def _configuration(cls, configuration: str, info: ValidationInfo) -> str:
        declared = _known(info).configurations.declared
        if configuration not in declared:
            hint = _did_you_mean(configuration, declared)
            raise _refuse(
                f"unknown configuration '{configuration}'{hint}; declare it in [[configurations]]"
            )
        return configuration

    @field_validator("allowed_origins")
    @classmethod
    def _allowed_origins(cls, origins: list[str]) -> list[str]:
        if not origins:
            raise _refuse("must list at least one origin, such as 'https://example.com'")
        problems = [problem for problem in map(_origin_problem, origins) if problem]
        if problems:
            raise _refuse(*problems)
        return origins

    def spec(self) -> EmbedSpec:
        return EmbedSpec(
            name=self.name,
            configuration=self.configuration,
            allowed_origins=tuple(self.allowed_origins),
            title=self.title,
            greeting=self.greeting,
            show_internals=self.show_internals,
        )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EMBED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


# --------------------------------------------------------------------------- error lines


def _field_name(loc: tuple[int | str, ...]) -> str:
    """pydantic's location in the file's words: `criteria.min_window`, `fallbacks[1]`."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else part
    return name


def _message(error: ErrorDetails, entry: type[_Table]) -> tuple[str, ...]:
    """What one pydantic error says, in the words the rest of the catalog's errors use."""
    kind, found, ctx = error["type"], error["input"], error.get("ctx") or {}
    if kind == _REFUSED:
        return tuple(ctx["all"])
    if kind == "extra_forbidden":
        table = _CriteriaTable if len(error["loc"]) > 1 else entry  # the one nested table
        return (f"unknown key{_did_you_mean(str(error['loc'][-1]), table.model_fields)}",)
    if kind == "model_type":
        return (f'expected a table such as {{ capabilities = ["chat"] }}, got {_describe(found)}',)
    if kind in ("greater_than", "greater_than_equal"):
        bound = "greater than" if kind == "greater_than" else "at least"
        limit = ctx["gt"] if kind == "greater_than" else ctx["ge"]
        return (f"must be {bound} {limit:g}, got {found:g}",)
    if kind == "missing":
        return ("required field is missing",)
    if kind == "finite_number":
        return (f"must be a finite number, got {found}",)
    if kind in _EXPECTED:
        return (f"expected {_EXPECTED[kind]}, got {_describe(found)}",)
    return (error["msg"],)


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "an array of strings",  # every array in the file holds strings
}
"""What a field wanted, by pydantic's error type, when the value found had another type."""


def _lines(exc: ValidationError, entry: type[_Table]) -> list[tuple[str, str]]:
    return [
        (_field_name(error["loc"]), message)
        for error in exc.errors(include_url=False)
        for message in _message(error, entry)
    ]


class _Problems:
    """Collects error lines for one file so validation can go on after the first problem."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.lines.append(f"{self.source}: {where}: {message}")


# --------------------------------------------------------------------------- the whole file


_SECTIONS = ("providers", "models", "configurations", "embeds")


def _section(
    data: Mapping[str, Any],
    section: str,
    entry_type: type[_Entry],
    known: _Known,
    problems: _Problems,
) -> _Section[Any]:
    """Validate each entry of one [[table]] array; keep the specs of those without fault.

    The names of broken entries are declared too, so references to them are not
    reported again as unknown.
    """
    result: _Section[Any] = _Section()
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
        found: list[tuple[str, str]] = []
        name = entry.get("name")
        if isinstance(name, str) and name.strip():
            label = f"{label} '{name}'"
            if name in result.declared:
                first = result.declared[name]
                found.append(("name", f"duplicate name '{name}' (already used by {first})"))
            else:
                result.declared[name] = label
        spec = None
        try:
            validated = entry_type.model_validate(entry, context={"known": known})
        except ValidationError as exc:
            found += _lines(exc, entry_type)
        else:
            spec = validated.spec()
        found += entry_type.presence_problems(entry)
        for field_name, message in found:
            problems.add(f"{label}: field '{field_name}'", message)
        if found or spec is None:
            result.broken = True
        else:
            result.specs[spec.name] = spec
    return result


def parse_catalog(data: object, source: str) -> Catalog:
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
    known = _Known(folder=Path(source).resolve().parent)
    known.providers = _section(data, "providers", _ProviderEntry, known, problems)
    known.models = _section(data, "models", _ModelEntry, known, problems)
    known.configurations = _section(data, "configurations", _ConfigurationEntry, known, problems)
    embeds = _section(data, "embeds", _EmbedEntry, known, problems)
    if known.configurations.count == 0 and isinstance(data.get("configurations", []), list):
        problems.add(
            "top level: field 'configurations'",
            "no [[configurations]]: declare at least one (the first is the default)",
        )
    if problems.lines:
        raise CatalogError(source, problems.lines)
    return Catalog(
        providers=known.providers.specs,
        models=known.models.specs,
        configurations=known.configurations.specs,
        embeds=embeds.specs,
        source=source,
    )


# --------------------------------------------------------------------------- value checks


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


def _check_api_key_env(value: str) -> None:
    """The file names the variable; the key stays in the environment, out of files and logs.

    The value is never echoed: if it is a secret, the error message must not leak it.
    """
    hint = 'put the NAME of the environment variable there (e.g. api_key_env = "OPENAI_API_KEY")'
    if value.startswith("sk-"):
        raise _refuse(
            f"looks like an API key itself, not a variable name; {hint} "
            "and set that variable to the key"
        )
    if not _ENV_NAME.fullmatch(value):
        raise _refuse(f"is not an environment variable name; {hint}")


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


def _describe_criteria(criteria: Criteria) -> str:
    parts = []
    if criteria.capabilities:
        parts.append(f"capabilities {sorted(criteria.capabilities)}")
    if criteria.min_context_window is not None:
        parts.append(f"min_context_window {criteria.min_context_window}")
    if criteria.max_cost_input is not None:
        parts.append(f"max_cost_input {criteria.max_cost_input:g} (unknown cost never matches)")
    return ", ".join(parts) if parts else "these criteria"
