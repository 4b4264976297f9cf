"""The specs: each pydantic model is both a [[table]] of the file and what the app reads.

Strict, because TOML has real types: "8k", 4096.0 or "yes" is a mistake to name, not a value
to coerce; a key no entry knows is a typo that would silently do nothing. Frozen, because one
catalog serves every request (a learned window is a copy).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic import ModelWrapValidatorHandler as Handler

from webapp.llm import tokenizer_settings
from webapp.llm.catalog import checks
from webapp.llm.did_you_mean import did_you_mean

DEFAULT_WINDOW = 8192
"""Window assumed for a model whose context_window is not given (docs/design.md section 3)."""
DEMO_WINDOW = 2048
"""The demo model's window: small, so trimming becomes visible within minutes of use."""
VENDOR_ROOTS = {"anthropic": "https://api.anthropic.com"}
VENDOR_ROOTS["gemini"] = "https://generativelanguage.googleapis.com"
"""Where a native provider is served when `base_url` is left out, as the vendor's SDK takes it."""
EMBED_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""An embed's name is part of its URL, /embed/{name}."""
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
EnvName = Annotated[str, Field(pattern=ENV_NAME)]
HEADER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]*$"
"""A header name as HTTP spells it (a token; letters, digits and dashes in practice)."""
RESERVED_HEADERS = frozenset({"authorization", "content-type", "accept", "host", "x-api-key"})
RESERVED_HEADERS |= {"x-goog-api-key", "anthropic-version", "content-length"}
"""Headers the provider sets itself: a session header of that name would replace them."""
ROOM = "the reply would leave no room for the prompt"

ProviderKind = Literal["openai", "anthropic", "gemini", "demo"]
Text = Annotated[str, Field(pattern=r"\S")]
"""A string with something in it: an empty name or URL is a mistake, not a value."""
Count = Annotated[int, Field(gt=0)]
Cost = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Names = Annotated[tuple[Text, ...], Field(strict=False)]  # a tuple keeps the spec hashable
Capability = Literal["chat", "completion", "embedding", "tools", "vision"]
"""What routing can ask of a model. Anything else is a typo that would silently never match."""
Capabilities = Annotated[frozenset[Capability], Field(strict=False)]
Raw = dict[str, Any]
Problems = Iterator[tuple[str, str]]
"""(field, message), one per problem."""


@dataclass
class Reading:
    """The validation context while a file is read. `declared` holds every name in the file,
    broken entries' too, so that one bad model yields one error, not also an "unknown model"
    for each configuration naming it; `valid` holds the entries read without fault so far,
    `broken` the sections with an entry that is not (a criteria check would be a guess)."""

    folder: Path
    """Where the file is: a relative tokenizer path is read from there."""
    declared: dict[str, list[str]]
    valid: defaultdict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    broken: set[str] = field(default_factory=set)

    def unknown(self, section: str, name: str | None) -> str | None:
        """Why `name` cannot be referred to, or None when `section` declares it."""
        if name is None or name in self.declared[section]:
            return None
        hint = did_you_mean(name, self.declared[section])
        return f"unknown {section[:-1]} '{name}'{hint}; declare it in [[{section}]]"

    def demo(self, provider: object) -> bool:
        spec = self.valid["providers"].get(provider) if isinstance(provider, str) else None
        return spec is not None and spec.kind == "demo"


class _Spec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _whole(cls, data: Any, handler: Handler[Self], info: ValidationInfo) -> Self:
        """What reads several keys or other entries: `_defaults`, and `_problems`, run even when
        fields fail so that all are reported at once, in the order of the fields. They see the
        keys as given, and `ok` those that passed (strict, so a key that passed is its value)."""
        reading = info.context if isinstance(info.context, Reading) else None
        data = cls._defaults(data, reading) | data if isinstance(data, dict) else data
        errors: list[Any] = []
        try:
            entry = handler(data)
        except ValidationError as exc:
            errors = exc.errors()
        if isinstance(data, dict):
            failed = {error["loc"][0] for error in errors if error["loc"]}
            ok = {key: value for key, value in data.items() if key not in failed}
            for at, text in cls._problems(data, ok, reading):
                error = {"type": "value_error", "input": None, "ctx": {"error": ValueError(text)}}
                errors.append(error | {"loc": (at,)})
            order = {key: index for index, key in enumerate(cls.model_fields)}
            errors.sort(key=lambda error: order.get(error["loc"][0], len(order)))
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return entry

    @classmethod
    def _defaults(cls, data: Raw, reading: Reading | None) -> Raw:
        return {}

    @classmethod
    def _problems(cls, data: Raw, ok: Raw, reading: Reading | None) -> Problems:
        return iter(())


class ProviderSpec(_Spec):
    """Where a model is served. The key itself never lives here, only its variable's name."""

    name: Text
    kind: ProviderKind
    base_url: Annotated[Text, AfterValidator(checks.url)] | None = None
    api_key_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    timeout: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    cache_key: Literal["auto", "off"] = "auto"
    """Whether a conversation's sends carry its key (`webapp.llm.affinity`): "auto" sends
    `prompt_cache_key` to OpenAI-style servers and `id_slot` to llama.cpp's."""
    slots: Count | None = None
    """llama.cpp's slot count, for a server whose `/slots` cannot be read."""
    session_header: Annotated[str, Field(pattern=HEADER_NAME)] | None = None
    """A header that carries the conversation's key to a router (e.g. `X-Session-Id`)."""

    @field_validator("session_header")
    @classmethod
    def _own_header(cls, name: str | None) -> str | None:
        if name is not None and name.lower() in RESERVED_HEADERS:
            raise ValueError(f"'{name}' is a header the provider sets itself; name another")
        return name

    @classmethod
    def _defaults(cls, data: Raw, reading: Reading | None) -> Raw:
        kind = data.get("kind")
        return {"base_url": VENDOR_ROOTS[kind]} if kind in ("anthropic", "gemini") else {}

    @classmethod
    def _problems(cls, data: Raw, ok: Raw, reading: Reading | None) -> Problems:
        if ok.get("kind") == "openai" and "base_url" not in data:
            example = "https://api.openai.com/v1 or http://127.0.0.1:11434/v1 for Ollama"
            yield "base_url", f"required for an 'openai' provider (e.g. {example})"


class ModelSpec(_Spec):
    """One model as a provider serves it; `name` is ours, `model_id` is the provider's."""

    name: Text
    provider: Text
    model_id: Text = ""  # left out, the name
    context_window: Count | None = None
    """Left out, the demo's window for a demo model; any other model's is discovered from
    its server after loading (webapp.llm.discovery)."""
    max_output_tokens: Count | None = None
    capabilities: Annotated[Capabilities, Field(min_length=1)] = frozenset({"chat"})
    """`vision`: the model reads pictures (a message with one goes to no other model)."""
    image_tokens: Count | None = None
    """What one picture costs, for an OpenAI-compatible server whose rule is not known
    (left out: the provider's own rule, webapp.llm.images)."""
    cost_input: Cost | None = None
    cost_output: Cost | None = None
    tokenizer: Text = "auto"
    """The setting as validated (a huggingface path is absolute); the estimate for a demo."""

    @property
    def window(self) -> int:
        """The window the bound uses: an unknown window is assumed, never unbounded."""
        return self.context_window if self.context_window is not None else DEFAULT_WINDOW

    @classmethod
    def _defaults(cls, data: Raw, reading: Reading | None) -> Raw:
        name = data.get("name")
        defaults: Raw = {"model_id": name} if isinstance(name, str) else {}
        if reading and reading.demo(data.get("provider")):
            defaults |= {"context_window": DEMO_WINDOW, "tokenizer": "estimate"}
        return defaults

    @classmethod
    def _problems(cls, data: Raw, ok: Raw, reading: Reading | None) -> Problems:
        if reading and (problem := reading.unknown("providers", ok.get("provider"))):
            yield "provider", problem
        most, window = ok.get("max_output_tokens"), ok.get("context_window")
        if most is not None and window is not None and most >= window:
            yield "max_output_tokens", f"{most} must be less than context_window ({window}): {ROOM}"

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, setting: str, info: ValidationInfo) -> str:
        reading = info.context if isinstance(info.context, Reading) else Reading(Path(), {})
        demo = reading.demo(info.data.get("provider"))
        return tokenizer_settings.check(setting, demo=demo, folder=reading.folder)


class Criteria(_Spec):
    """What a criteria configuration asks of a model; resolved per call, never stored."""

    capabilities: Capabilities = frozenset()
    min_context_window: Count | None = None
    max_cost_input: Cost | None = None
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

    def describe(self) -> str:
        asked = self.model_dump(exclude_defaults=True, exclude={"prefer_lowest_cost"})
        asked |= {"capabilities": sorted(self.capabilities)} if self.capabilities else {}
        unknown = " (unknown cost never matches)" if "max_cost_input" in asked else ""
        return ", ".join(f"{key} {value}" for key, value in asked.items()) + unknown


class McpServerSpec(_Spec):
    """An MCP server whose tools a configuration may offer the model. Only the admin's file
    declares one: a user can neither add a server nor change its command. Secrets never sit
    in the file: `env_from` and `headers_from` name the environment variables to read them
    from, and a stdio server gets those and nothing else of the app's environment."""

    name: Annotated[str, Field(pattern=EMBED_NAME)]
    transport: Literal["stdio", "http"]
    command: Text | None = None
    args: tuple[str, ...] = Field(default=(), strict=False)
    env_from: dict[Annotated[str, Field(pattern=ENV_NAME)], EnvName] = {}
    """The server's variable -> the app's environment variable whose value it gets."""
    url: Annotated[Text, AfterValidator(checks.url)] | None = None
    headers_from: dict[Annotated[str, Field(pattern=HEADER_NAME)], EnvName] = {}
    tools: Names | None = None
    """The tools to offer, by the server's names; left out, all it lists."""
    approval: Literal["never", "always"] = "never"
    timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """Seconds one call (or the connection) may take before it is given up as a fault."""
    max_result_tokens: Count = 4000

    @classmethod
    def _problems(cls, data: Raw, ok: Raw, reading: Reading | None) -> Problems:
        """Each transport's own keys, required where it needs them and refused elsewhere."""
        needs = {"stdio": ("command",), "http": ("url",)}
        takes = {"stdio": ("command", "args", "env_from"), "http": ("url", "headers_from")}
        transport = ok.get("transport")
        if transport not in needs:
            return
        kind = {"stdio": "a 'stdio' server", "http": "an 'http' server"}
        for key in needs[transport]:
            if key not in data:
                yield key, f"required for {kind[transport]}"
        other = "http" if transport == "stdio" else "stdio"
        for key in takes[other]:
            if key in data:
                yield key, f"belongs to {kind[other]}, not this '{transport}' one"


class ConfigurationSpec(_Spec):
    """What a user picks: a fixed model or criteria, plus prompt, reply size and fallbacks."""

    name: Text
    model: Text | None = None
    criteria: Criteria | None = None
    system_prompt: str | None = None
    max_tokens: Count | None = None
    fallbacks: Names = ()
    trim_to: float = Field(default=0.75, gt=0, le=1, allow_inf_nan=False)
    """The share of the budget the prompt may use after a cut that has to move: room for
    several sends that are pure appends, which the engine's prompt cache serves
    (see `webapp.llm.window`)."""
    tools: Names = ()
    """The [[mcp_servers]] whose tools the model is offered in the chat."""
    max_tool_steps: Count = 8
    """Model calls one turn may make while it keeps calling tools; then it must answer."""
    keep_tool_results: Annotated[int, Field(ge=0)] = 2
    """Tool results of the newest turns that are never cleared when the cut moves."""
    summarize: bool = False
    """Fold what each move of the cut leaves out into a summary sent right after the head
    (`webapp.llm.summaries`); a conversation may turn it off or on for itself."""
    summary_model: Text | None = None
    """The model that writes the summaries (default: the one that answers, whose prompt
    cache already holds the request the summary call replays)."""
    summary_max_tokens: Count | None = None
    """The summary's room, kept on every send (default: 10% of the budget)."""

    @classmethod
    def _problems(cls, data: Raw, ok: Raw, reading: Reading | None) -> Problems:
        """Exactly one of model and criteria, judged on the keys given; criteria only when
        every model is valid (a broken one might have matched); each fallback a declared
        model, not the own one, that can hold a prompt after the reply."""
        given = [key for key in ("model", "criteria") if data.get(key) is not None]
        if len(given) == 2:
            yield "model", "set either 'model' (a fixed model) or 'criteria', not both"
        elif not given:
            chosen = "'criteria' (a model chosen per call)"
            yield "model", f"required: set 'model' (a fixed model) or {chosen}"
        if reading is None:
            return
        model, most, models = ok.get("model"), ok.get("max_tokens"), reading.valid["models"]
        if problem := reading.unknown("models", model):
            yield "model", problem
        fixed = models.get(model or "")
        if most and fixed and fixed.context_window is not None and most >= fixed.window:
            window = f"the window of model '{model}' ({fixed.window})"
            yield "max_tokens", f"{most} must be less than {window}: {ROOM}"
        if "criteria" in ok and "models" not in reading.broken:
            criteria = Criteria.model_validate(ok["criteria"])
            if not any(criteria.matches(spec) for spec in models.values()):
                yield "criteria", f"no model in [[models]] matches {criteria.describe()}"
        if problem := reading.unknown("models", ok.get("summary_model")):
            yield "summary_model", problem
        servers = ok.get("tools", [])
        for index, name in enumerate(servers):
            if problem := reading.unknown("mcp_servers", name):
                yield "tools", problem
            elif name in servers[:index]:
                yield "tools", f"server '{name}' is listed twice"
        fallbacks = ok.get("fallbacks", [])
        for index, name in enumerate(fallbacks):
            spec = models.get(name)
            if problem := reading.unknown("models", name):
                yield "fallbacks", problem
            elif name in fallbacks[:index]:
                yield "fallbacks", f"model '{name}' is listed twice"
            elif name == model:
                yield "fallbacks", f"model '{name}' is the configuration's own model"
            elif spec and spec.context_window is not None and most and most >= spec.window:
                window = f"a window of {spec.window}, not more than max_tokens {most}"
                yield "fallbacks", f"model '{name}' has {window}"


class EmbedSpec(_Spec):
    """An iframe widget: which configuration it chats with and which sites may frame it."""

    name: Annotated[str, Field(pattern=EMBED_NAME)]
    configuration: Text
    allowed_origins: Annotated[Names, Field(min_length=1), AfterValidator(checks.origins)]
    title: Text | None = None
    greeting: str | None = None
    show_internals: bool = False
    """Whether visitors see token counts and the model's and configuration's names (the
    meter's figures, each trimmed turn's facts, the badge): off unless the site asks."""
    files: bool | list[Literal["text", "document", "image"]] = False
    """What visitors may attach (the embed's composer then takes files, uploaded to
    `/embed/{name}/files`): nothing (false, the default), any file (true), or only the
    kinds listed: "text" (text and code), "document" (PDFs, read as their text), "image"."""
    max_file_bytes: Annotated[int, Field(gt=0)] | None = None
    """The largest file a visitor may attach, in bytes (the server's
    `WEBAPP_MAX_FILE_BYTES` when larger or not set)."""

    @property
    def file_kinds(self) -> tuple[str, ...]:
        """The kinds of file a visitor may attach, none when files are off."""
        if self.files is True:
            return ("text", "document", "image")
        return tuple(self.files) if self.files else ()

    @classmethod
    def _problems(cls, data: Raw, ok: Raw, reading: Reading | None) -> Problems:
        if reading and (problem := reading.unknown("configurations", ok.get("configuration"))):
            yield "configuration", problem


Spec = ProviderSpec | ModelSpec | McpServerSpec | ConfigurationSpec | EmbedSpec
SECTIONS: dict[str, type[Spec]] = {"providers": ProviderSpec, "models": ModelSpec}
SECTIONS |= {"mcp_servers": McpServerSpec}
SECTIONS |= {"configurations": ConfigurationSpec, "embeds": EmbedSpec}
"""The file's sections, in the order they are read: each refers only to those before it."""


class Catalog(BaseModel):
    """Everything the file declares. Dicts keep file order, so "first" means first in the file."""

    model_config = ConfigDict(frozen=True)
    providers: dict[str, ProviderSpec]
    models: dict[str, ModelSpec]
    mcp_servers: dict[str, McpServerSpec] = {}
    configurations: dict[str, ConfigurationSpec]
    embeds: dict[str, EmbedSpec]
    source: str | None = None

    @property
    def default_configuration(self) -> str:
        """The first configuration: what a new conversation uses when none is asked for."""
        for name in self.configurations:
            return name
        raise LookupError("the catalog has no configurations")
