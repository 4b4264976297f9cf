"""The specs: each pydantic model is both a [[table]] of the file and what the app reads.

Strict, because TOML has real types: "8k", 4096.0 or "yes" is a mistake to name, not a
value to coerce; and a key no entry knows is a typo that would silently do nothing.
Frozen, because one catalog is shared by every request (a learned window is a copy).

Value checks run wherever a spec is built. Checks against the rest of the file (a model's
provider, a configuration's models) run only while a file is read, with `Reading` as the
validation context: field validators, so an entry's references are reported together with
its other problems, each at its field, in field order.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from webapp.llm.catalog import checks
from webapp.llm.catalog.messages import describe, did_you_mean, entry_label, entry_name, refuse

DEFAULT_WINDOW = 8192
"""Window assumed for a model whose context_window is not given (docs/design.md section 3)."""

DEMO_WINDOW = 2048
"""The demo model's window: small, so trimming becomes visible within minutes of use."""

DEFAULT_TRIM_TO = 0.75
"""A moved cut leaves the prompt at this share of the budget: room for several more sends
that are pure appends (the engine's prompt cache serves all but the new turn)."""

ProviderKind = Literal["openai", "anthropic", "gemini", "demo"]
PROVIDER_KINDS: tuple[str, ...] = get_args(ProviderKind)

VENDOR_ROOTS: dict[str, str] = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}
"""Where a native provider is served when its `base_url` is left out: the vendor's root,
as the vendor's SDK takes it (the provider adds the API's paths)."""

Text = Annotated[str, Strict(), AfterValidator(checks.not_blank)]
Count = Annotated[int, Field(gt=0)]
Cost = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Names = Annotated[tuple[Text, ...], Field(strict=False)]
"""An array of strings, kept as a tuple so that a spec stays hashable."""
Capabilities = Annotated[
    frozenset[Text], Field(strict=False), AfterValidator(checks.known_capabilities)
]


@dataclass
class Reading:
    """The validation context while a file is read, for the checks that need other entries.

    `declared` holds every name of every section, broken entries' too, so that one bad
    model yields one error, not another "unknown model" for each configuration naming it.
    """

    folder: Path
    """Where the file is: a relative tokenizer path is read from there."""
    declared: dict[str, dict[str, str]]
    """Per section, each name and where it is first declared."""
    sizes: dict[str, int]
    """Per section, how many entries the file has (-1: the section is not an array)."""
    valid: defaultdict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    seen: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def of(cls, data: dict[str, Any], folder: Path) -> Reading:
        declared: dict[str, dict[str, str]] = {}
        sizes: dict[str, int] = {}
        for section in CatalogFile.model_fields:
            entries = data.get(section, [])
            entries = entries if isinstance(entries, list) else []
            sizes[section] = len(entries) if isinstance(data.get(section, []), list) else -1
            declared[section] = {}
            for index, entry in enumerate(entries):
                if (name := entry_name(entry)) is not None:
                    declared[section].setdefault(name, entry_label(section, index, entry))
        return cls(folder, declared, sizes)

    def complete(self, section: str) -> bool:
        """Whether every entry of `section` is valid."""
        return len(self.valid[section]) == self.sizes[section]

    def served_by_demo(self, provider: object) -> bool:
        spec = self.valid["providers"].get(provider) if isinstance(provider, str) else None
        return isinstance(spec, ProviderSpec) and spec.kind == "demo"

    def unknown(self, section: str, name: str) -> str | None:
        """Why `name` cannot be referred to, or None when some entry of `section` declares it."""
        if name in self.declared[section]:
            return None
        hint = did_you_mean(name, self.declared[section])
        return f"unknown {section[:-1]} '{name}'{hint}; declare it in [[{section}]]"


def _reading(info: ValidationInfo) -> Reading | None:
    return info.context if isinstance(info.context, Reading) else None


class _Spec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _Entry(_Spec):
    """One entry of a [[section]], known by its name."""

    section: ClassVar[str]
    name: Text

    @field_validator("name")
    @classmethod
    def _once(cls, name: str, info: ValidationInfo) -> str:
        reading = _reading(info)
        if reading is not None:
            if name in reading.seen[cls.section]:
                first = reading.declared[cls.section][name]
                raise refuse(f"duplicate name '{name}' (already used by {first})")
            reading.seen[cls.section].add(name)
        return name

    @model_validator(mode="after")
    def _record(self, info: ValidationInfo) -> Self:
        """A valid entry is what the next sections' checks compare against."""
        if (reading := _reading(info)) is not None:
            reading.valid[self.section][self.name] = self
        return self


class ProviderSpec(_Entry):
    """Where a model is served. The key itself never lives here, only its variable's name."""

    section: ClassVar[str] = "providers"
    kind: ProviderKind
    base_url: Text | None = Field(default=None, validate_default=True)
    api_key_env: Annotated[Text, AfterValidator(checks.api_key_env)] | None = None
    timeout: Seconds = 60.0

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, kind: object) -> object:
        if not isinstance(kind, str):
            raise refuse(f"expected a string, got {describe(kind)}")
        if kind not in PROVIDER_KINDS:
            expected = " or ".join(f"'{k}'" for k in PROVIDER_KINDS)
            hint = did_you_mean(kind, PROVIDER_KINDS)
            raise refuse(f"unknown provider kind '{kind}'{hint}; expected {expected}")
        return kind

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, base_url: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if base_url is not None:
            return checks.url(base_url)
        if kind == "openai":
            raise refuse(
                "required for an 'openai' provider (e.g. https://api.openai.com/v1 "
                "or http://127.0.0.1:11434/v1 for Ollama)"
            )
        return VENDOR_ROOTS.get(kind or "")


class ModelSpec(_Entry):
    """One model as a provider serves it; `name` is ours, `model_id` is the provider's."""

    section: ClassVar[str] = "models"
    provider: Text
    model_id: Text = ""
    """Left out, the name (filled in before validation)."""
    context_window: Count | None = None
    """Left out, a demo model gets the demo's window; any other model's is discovered from
    its server after loading (webapp.llm.discovery)."""
    max_output_tokens: Count | None = None
    capabilities: Capabilities = frozenset({"chat"})
    cost_input: Cost | None = None
    cost_output: Cost | None = None
    tokenizer: Text = "auto"
    """The `tokenizer` setting, validated; a huggingface path is absolute. Left out, the
    estimate for a demo model."""

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

    @model_validator(mode="before")
    @classmethod
    def _left_out(cls, data: Any, info: ValidationInfo) -> Any:
        """The defaults that depend on the entry's other keys."""
        if not isinstance(data, dict):
            return data
        name, reading = entry_name(data), _reading(info)
        defaults: dict[str, Any] = {} if name is None else {"model_id": name}
        if reading is not None and reading.served_by_demo(data.get("provider")):
            defaults |= {"context_window": DEMO_WINDOW, "tokenizer": "estimate"}
        return defaults | data

    @field_validator("provider")
    @classmethod
    def _provider(cls, provider: str, info: ValidationInfo) -> str:
        reading = _reading(info)
        if reading is not None and (problem := reading.unknown("providers", provider)):
            raise refuse(problem)
        return provider

    @field_validator("max_output_tokens")
    @classmethod
    def _max_output_tokens(cls, most: int | None, info: ValidationInfo) -> int | None:
        # An unknown window is checked against max_output_tokens once discovered.
        window = info.data.get("context_window")
        if most is not None and window is not None and most >= window:
            raise refuse(
                f"{most} must be less than context_window ({window}): "
                "the reply would leave no room for the prompt"
            )
        return most

    @field_validator("capabilities")
    @classmethod
    def _capabilities(cls, capabilities: frozenset[str]) -> frozenset[str]:
        if not capabilities:
            raise refuse('must list at least one capability (default is ["chat"])')
        return capabilities

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, setting: str, info: ValidationInfo) -> str:
        reading = _reading(info)
        demo = reading is not None and reading.served_by_demo(info.data.get("provider"))
        folder = reading.folder if reading is not None else Path()
        return checks.tokenizer(setting, demo=demo, folder=folder)


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
        parts = []
        if self.capabilities:
            parts.append(f"capabilities {sorted(self.capabilities)}")
        if self.min_context_window is not None:
            parts.append(f"min_context_window {self.min_context_window}")
        if self.max_cost_input is not None:
            parts.append(f"max_cost_input {self.max_cost_input:g} (unknown cost never matches)")
        return ", ".join(parts) if parts else "these criteria"


class ConfigurationSpec(_Entry):
    """What a user picks: a fixed model or criteria, plus prompt, reply size and fallbacks."""

    section: ClassVar[str] = "configurations"
    model: Text | None = None
    criteria: Criteria | None = None
    system_prompt: str | None = None
    max_tokens: Count | None = None
    fallbacks: Names = ()
    trim_to: float = Field(default=DEFAULT_TRIM_TO, gt=0, le=1, allow_inf_nan=False)
    """Where a cut that has to move goes: the share of the budget the prompt may use
    after it (see `webapp.llm.window`)."""

    @property
    def is_fixed(self) -> bool:
        return self.model is not None

    @model_validator(mode="after")
    def _model_or_criteria(self) -> Self:
        if self.model is not None and self.criteria is not None:
            raise refuse("set either 'model' (a fixed model) or 'criteria', not both", at="model")
        if self.model is None and self.criteria is None:
            raise refuse(
                "required: set 'model' (a fixed model) or 'criteria' (a model chosen per call)",
                at="model",
            )
        return self

    @field_validator("model")
    @classmethod
    def _model(cls, model: str | None, info: ValidationInfo) -> str | None:
        reading = _reading(info)
        if model is not None and reading is not None and (problem := reading.unknown("models", model)):
            raise refuse(problem)
        return model

    @field_validator("criteria")
    @classmethod
    def _criteria(cls, criteria: Criteria | None, info: ValidationInfo) -> Criteria | None:
        """Checked only when every model is valid: a broken one might have matched."""
        reading = _reading(info)
        if criteria is None or reading is None or not reading.complete("models"):
            return criteria
        if not any(criteria.matches(model) for model in reading.valid["models"].values()):
            raise refuse(f"no model in [[models]] matches {criteria.describe()}")
        return criteria

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens(cls, max_tokens: int | None, info: ValidationInfo) -> int | None:
        reading = _reading(info)
        fixed = reading.valid["models"].get(info.data.get("model") or "") if reading else None
        if max_tokens is not None and isinstance(fixed, ModelSpec) and fixed.context_window:
            if max_tokens >= fixed.window:
                raise refuse(
                    f"{max_tokens} must be less than the window of model '{fixed.name}' "
                    f"({fixed.window}): the reply would leave no room for the prompt"
                )
        return max_tokens

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks(cls, fallbacks: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """Each fallback must be a declared model that can still hold a prompt after the reply."""
        reading = _reading(info)
        model, max_tokens = info.data.get("model"), info.data.get("max_tokens")
        problems: list[str] = []
        for index, fallback in enumerate(fallbacks):
            spec = reading.valid["models"].get(fallback) if reading else None
            if reading is not None and (problem := reading.unknown("models", fallback)):
                problems.append(problem)
            elif fallback in fallbacks[:index]:
                problems.append(f"model '{fallback}' is listed twice")
            elif fallback == model:
                problems.append(f"model '{fallback}' is the configuration's own model")
            elif isinstance(spec, ModelSpec) and spec.context_window and max_tokens is not None:
                if max_tokens >= spec.window:
                    problems.append(
                        f"model '{fallback}' has a window of {spec.window}, not more than "
                        f"max_tokens {max_tokens}"
                    )
        if problems:
            raise refuse(*problems)
        return fallbacks


class EmbedSpec(_Entry):
    """An iframe widget: which configuration it chats with and which sites may frame it."""

    section: ClassVar[str] = "embeds"
    name: Annotated[Text, AfterValidator(checks.embed_name)]
    configuration: Text
    allowed_origins: Annotated[Names, AfterValidator(checks.origins)]
    title: Text | None = None
    greeting: str | None = None
    show_internals: bool = False
    """Whether visitors see token counts and the model's and configuration's names (the
    meter's figures, each trimmed turn's facts, the badge): off unless the site asks."""

    @field_validator("configuration")
    @classmethod
    def _configuration(cls, configuration: str, info: ValidationInfo) -> str:
        reading = _reading(info)
        if reading is not None and (problem := reading.unknown("configurations", configuration)):
            raise refuse(problem)
        return configuration


class Catalog(BaseModel):
    """Everything the file declares. Dicts keep file order, so "first" means first in the file."""

    model_config = ConfigDict(frozen=True)

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


def _cost_order(model: ModelSpec) -> tuple[bool, float, str]:
    cost = model.known_cost
    return (cost is None, cost if cost is not None else 0.0, model.name)


class CatalogFile(_Spec):
    """The file: four arrays of tables, validated in this order so that each section's
    references are checked against the sections before it."""

    providers: list[ProviderSpec] = []
    models: list[ModelSpec] = []
    configurations: list[ConfigurationSpec] = Field(default=[], min_length=1, validate_default=True)
    embeds: list[EmbedSpec] = []

    def catalog(self, source: str) -> Catalog:
        def by_name(entries: list[Any]) -> dict[str, Any]:
            return {entry.name: entry for entry in entries}

        return Catalog(
            providers=by_name(self.providers),
            models=by_name(self.models),
            configurations=by_name(self.configurations),
            embeds=by_name(self.embeds),
            source=source,
        )
