"""The specs: each pydantic model is both a [[table]] of the file and what the app reads.

Strict, because TOML has real types: "8k", 4096.0 or "yes" is a mistake to name, not a value
to coerce; a key no entry knows is a typo that would silently do nothing. Frozen, because one
catalog serves every request (a learned window is a copy). Checks against other entries run
only while a file is read, with `Reading` as the validation context, and each runs even when
another fails, so that a file's problems are all reported at once, each at its field.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from webapp.llm.catalog import checks
from webapp.llm.catalog.checks import did_you_mean

DEFAULT_WINDOW = 8192
"""Window assumed for a model whose context_window is not given (docs/design.md section 3)."""
DEMO_WINDOW = 2048
"""The demo model's window: small, so trimming becomes visible within minutes of use."""
VENDOR_ROOTS = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}
"""Where a native provider is served when `base_url` is left out, as the vendor's SDK takes it."""
EMBED_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""An embed's name is part of its URL, /embed/{name}."""

ProviderKind = Literal["openai", "anthropic", "gemini", "demo"]
Text = Annotated[str, Field(pattern=r"\S")]
"""A string with something in it: an empty name or URL is a mistake, not a value."""
Count = Annotated[int, Field(gt=0)]
Cost = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Names = Annotated[tuple[Text, ...], Field(strict=False)]  # a tuple keeps the spec hashable
Capabilities = Annotated[frozenset[Text], Field(strict=False), AfterValidator(checks.capabilities)]


@dataclass
class Reading:
    """The validation context while a file is read. `declared` holds every name in the file,
    broken entries' too, so that one bad model yields one error, not also an "unknown model"
    for each configuration naming it; `valid` holds the entries read without fault so far."""

    folder: Path
    """Where the file is: a relative tokenizer path is read from there."""
    declared: dict[str, list[str]]
    valid: defaultdict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    broken: set[str] = field(default_factory=set)
    """The sections with an entry that is not valid: a criteria check would be a guess."""

    def unknown(self, section: str, name: str) -> str | None:
        """Why `name` cannot be referred to, or None when `section` declares it."""
        if name in self.declared.get(section, ()):
            return None
        hint = did_you_mean(name, self.declared.get(section, ()))
        return f"unknown {section[:-1]} '{name}'{hint}; declare it in [[{section}]]"


def _reading(info: ValidationInfo) -> Reading | None:
    return info.context if isinstance(info.context, Reading) else None


def _declared_in(section: str) -> AfterValidator:
    """A reference to an entry of `section`, checked when a file is read."""

    def check(name: str, info: ValidationInfo) -> str:
        if (reading := _reading(info)) and (problem := reading.unknown(section, name)):
            raise ValueError(problem)
        return name

    return AfterValidator(check)


class _Spec(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class ProviderSpec(_Spec):
    """Where a model is served. The key itself never lives here, only its variable's name."""

    name: Text
    kind: ProviderKind
    base_url: Text | None = Field(default=None, validate_default=True)
    api_key_env: Annotated[Text, AfterValidator(checks.api_key_env)] | None = None
    timeout: float = Field(default=60.0, gt=0, allow_inf_nan=False)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, base_url: str | None, info: ValidationInfo) -> str | None:
        if base_url is not None:
            return checks.url(base_url)
        if info.data.get("kind") == "openai":
            raise ValueError(
                "required for an 'openai' provider (e.g. https://api.openai.com/v1 "
                "or http://127.0.0.1:11434/v1 for Ollama)"
            )
        return VENDOR_ROOTS.get(info.data.get("kind", ""))


class ModelSpec(_Spec):
    """One model as a provider serves it; `name` is ours, `model_id` is the provider's."""

    name: Text
    provider: Annotated[Text, _declared_in("providers")]
    model_id: Text = ""  # left out, the name (see _left_out)
    context_window: Count | None = None
    """Left out, the demo's window for a demo model; any other model's is discovered from
    its server after loading (webapp.llm.discovery)."""
    max_output_tokens: Count | None = None
    capabilities: Annotated[Capabilities, Field(min_length=1)] = frozenset({"chat"})
    cost_input: Cost | None = None
    cost_output: Cost | None = None
    tokenizer: Text = "auto"
    """The setting as validated (a huggingface path is absolute); the estimate for a demo."""

    @property
    def window(self) -> int:
        """The window the bound uses: an unknown window is assumed, never unbounded."""
        return self.context_window if self.context_window is not None else DEFAULT_WINDOW

    @model_validator(mode="before")
    @classmethod
    def _left_out(cls, data: Any, info: ValidationInfo) -> Any:
        """The defaults that depend on the entry's other keys."""
        if not isinstance(data, dict):
            return data
        defaults: dict[str, Any] = {"model_id": data.get("name")} if "name" in data else {}
        if _demo(info, data.get("provider")):
            defaults |= {"context_window": DEMO_WINDOW, "tokenizer": "estimate"}
        return defaults | data

    @field_validator("max_output_tokens")
    @classmethod
    def _max_output_tokens(cls, most: int | None, info: ValidationInfo) -> int | None:
        # An unknown window is checked against max_output_tokens once discovered.
        window = info.data.get("context_window")
        if most is not None and window is not None and most >= window:
            raise ValueError(
                f"{most} must be less than context_window ({window}): "
                "the reply would leave no room for the prompt"
            )
        return most

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, setting: str, info: ValidationInfo) -> str:
        folder = reading.folder if (reading := _reading(info)) else Path()
        demo = _demo(info, info.data.get("provider"))
        return checks.tokenizer(setting, demo=demo, folder=folder)


def _demo(info: ValidationInfo, provider: object) -> bool:
    reading = _reading(info)
    spec = reading.valid["providers"].get(str(provider)) if reading else None
    return spec is not None and spec.kind == "demo"


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
        asked = [f"capabilities {sorted(self.capabilities)}"] if self.capabilities else []
        if self.min_context_window is not None:
            asked.append(f"min_context_window {self.min_context_window}")
        if self.max_cost_input is not None:
            asked.append(f"max_cost_input {self.max_cost_input:g} (unknown cost never matches)")
        return ", ".join(asked) or "these criteria"


class ConfigurationSpec(_Spec):
    """What a user picks: a fixed model or criteria, plus prompt, reply size and fallbacks."""

    name: Text
    model: Annotated[Text, _declared_in("models")] | None = None
    criteria: Criteria | None = None
    system_prompt: str | None = None
    max_tokens: Count | None = None
    fallbacks: Names = ()
    trim_to: float = Field(default=0.75, gt=0, le=1, allow_inf_nan=False)
    """The share of the budget the prompt may use after a cut that has to move: room for
    several sends that are pure appends, which the engine's prompt cache serves
    (see `webapp.llm.window`)."""

    @property
    def is_fixed(self) -> bool:
        return self.model is not None

    @model_validator(mode="wrap")
    @classmethod
    def _model_or_criteria(
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
        """Exactly one of the two, judged on the keys given, so that it is reported together
        with the fields' own problems."""
        given = [
            key
            for key in ("model", "criteria")
            if isinstance(data, dict) and data.get(key) is not None
        ]
        choice = "'model' (a fixed model) or 'criteria' (a model chosen per call)"
        problem = f"required: set {choice}" if not given else None
        if len(given) == 2:
            problem = "set either 'model' (a fixed model) or 'criteria', not both"
        errors: list[Any] = []
        try:
            entry = handler(data)
        except ValidationError as exc:
            errors = exc.errors()
        if problem and isinstance(data, dict):
            error = ValueError(problem)
            errors.append(
                {"type": "value_error", "loc": ("model",), "input": None, "ctx": {"error": error}}
            )
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return entry

    @field_validator("criteria")
    @classmethod
    def _criteria(cls, criteria: Criteria | None, info: ValidationInfo) -> Criteria | None:
        """Checked only when every model is valid: a broken one might have matched."""
        reading = _reading(info)
        if criteria is None or reading is None or "models" in reading.broken:
            return criteria
        if not any(criteria.matches(model) for model in reading.valid["models"].values()):
            raise ValueError(f"no model in [[models]] matches {criteria.describe()}")
        return criteria

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens(cls, most: int | None, info: ValidationInfo) -> int | None:
        reading = _reading(info)
        fixed = reading.valid["models"].get(info.data.get("model") or "") if reading else None
        if most and fixed and fixed.context_window is not None and most >= fixed.window:
            raise ValueError(
                f"{most} must be less than the window of model '{fixed.name}' "
                f"({fixed.window}): the reply would leave no room for the prompt"
            )
        return most

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks(cls, fallbacks: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """Each a declared model, not the own one, that can hold a prompt after the reply."""
        if (reading := _reading(info)) is None:
            return fallbacks
        most, problems = info.data.get("max_tokens"), []
        for index, name in enumerate(fallbacks):
            spec = reading.valid["models"].get(name)
            if problem := reading.unknown("models", name):
                problems.append(problem)
            elif name in fallbacks[:index]:
                problems.append(f"model '{name}' is listed twice")
            elif name == info.data.get("model"):
                problems.append(f"model '{name}' is the configuration's own model")
            elif spec and spec.context_window is not None and most and most >= spec.window:
                window = f"a window of {spec.window}, not more than max_tokens {most}"
                problems.append(f"model '{name}' has {window}")
        if problems:
            raise ValueError(*problems)
        return fallbacks


class EmbedSpec(_Spec):
    """An iframe widget: which configuration it chats with and which sites may frame it."""

    name: Annotated[str, Field(pattern=EMBED_NAME)]
    configuration: Annotated[Text, _declared_in("configurations")]
    allowed_origins: Annotated[Names, AfterValidator(checks.origins)]
    title: Text | None = None
    greeting: str | None = None
    show_internals: bool = False
    """Whether visitors see token counts and the model's and configuration's names (the
    meter's figures, each trimmed turn's facts, the badge): off unless the site asks."""


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
        """Models matching `criteria`, best first, in an order that never depends on chance:
        lowest cost first when asked (unknown cost last, since it may be anything), else the
        largest window first, since a bigger window trims less. Ties break on the name."""
        matching = [model for model in self.models.values() if criteria.matches(model)]
        if criteria.prefer_lowest_cost:
            return sorted(matching, key=_cost_order)
        return sorted(matching, key=lambda model: (-model.window, model.name))


def _cost_order(model: ModelSpec) -> tuple[bool, float, str]:
    if model.cost_input is None or model.cost_output is None:
        return (True, 0.0, model.name)
    return (False, model.cost_input + model.cost_output, model.name)
