"""What a preset may hold: a name of the user's own, a configuration the catalog has, a
temperature a provider takes, an answer no longer than the configuration's models write,
and a system prompt that, with the user's custom instructions, leaves room for a message
(the head-room rule custom instructions are held to, `webapp.llm.head_room`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webapp.accounts.preferences import MAX_INSTRUCTIONS, checked_configuration, with_instructions
from webapp.chat.stored.presets import FIELDS, NAME_MAX, PresetValues, as_columns
from webapp.errors import InvalidInput, refuse_nul
from webapp.llm.catalog import Catalog
from webapp.llm.head_room import crowded_out
from webapp.llm.routing import Route, RoutingError, resolve

TEMPERATURE_RANGE = (0.0, 2.0)
"""What OpenAI-compatible servers accept; Anthropic's and Gemini's ranges lie within."""


def checked_preset(
    given: Mapping[str, Any],
    catalog: Catalog,
    instructions: str,
    before: PresetValues | None = None,
) -> PresetValues:
    """`given` (a JSON body or a form, over `before` for an edit), checked: InvalidInput
    (400) names the first thing wrong. `instructions`: the user's custom instructions,
    which every send carries beside the preset's system prompt."""
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]!r}; a preset has {', '.join(FIELDS)}")
    merged = {**(as_columns(before) if before else {}), **given}
    if before is None and "name" not in given:
        raise InvalidInput("a preset needs a name")
    name = _name(merged.get("name"))
    configuration = checked_configuration(
        _text(merged.get("configuration") or ""), catalog.configurations
    )
    configuration = configuration or catalog.default_configuration
    prompt = refuse_nul(_text(merged.get("system_prompt") or ""), "the system prompt")
    prompt = prompt.replace("\r\n", "\n").strip()
    if len(prompt) > MAX_INSTRUCTIONS:
        raise InvalidInput(
            f"a preset's system prompt is at most {MAX_INSTRUCTIONS:,} characters; "
            f"this one is {len(prompt):,}"
        )
    temperature = _temperature(merged.get("temperature"))
    try:
        route: Route | None = resolve(catalog, configuration)
    except RoutingError:
        route = None  # nothing to fit to: a send will say so
    max_tokens = _max_tokens(merged.get("max_tokens"), route)
    if route is not None:
        crowded = crowded_out(
            catalog,
            route,
            with_instructions(prompt, instructions) or "",
            max_tokens=max_tokens,
            named="the preset's system prompt with your custom instructions",
            where="the preset",
        )
        if crowded is not None:
            raise InvalidInput(crowded)
    is_default = merged.get("is_default", False)
    if not isinstance(is_default, bool):
        raise InvalidInput("is_default is true or false")
    return PresetValues(name, configuration, prompt, temperature, max_tokens, is_default)


def output_limit(route: Route) -> int:
    """The longest answer every model of the route can write: its stated output limit,
    else less than its window."""
    return min(model.max_output_tokens or model.window - 1 for model in route.models)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput("names, configurations and system prompts are text")
    return value


def _name(value: object) -> str:
    name = " ".join(refuse_nul(_text(value or ""), "the name").split())
    if not name:
        raise InvalidInput("a preset needs a name")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"a preset's name is at most {NAME_MAX} characters; this is {len(name)}")
    return name


def _temperature(value: object) -> float | None:
    if value is None or value == "":
        return None
    try:
        temperature = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInput(f"temperature is a number, not {value!r}") from None
    low, high = TEMPERATURE_RANGE
    if isinstance(value, bool) or not low <= temperature <= high:
        raise InvalidInput(f"temperature is from {low:g} to {high:g}, not {value!r}")
    return temperature


def _max_tokens(value: object, route: Route | None) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not str(value).strip().isdecimal():
        raise InvalidInput(f"max_tokens is a whole number of tokens, not {value!r}")
    most = int(str(value).strip())
    if most < 1:
        raise InvalidInput("max_tokens is at least 1")
    limit = output_limit(route) if route is not None else None
    if limit is not None and most > limit:
        raise InvalidInput(
            f"max_tokens {most:,} is over what configuration "
            f"{route.configuration.name!r} can answer ({limit:,} tokens)"  # type: ignore[union-attr]
        )
    return most
