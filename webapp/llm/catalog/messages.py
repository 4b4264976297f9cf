"""Error lines in one style: `<file>: <entry>: field '<field>': <message>`.

The catalog's own checks raise `refuse(...)`, whose words are shown as they are; pydantic's
errors (types, ranges, required and unknown keys) are put in the same words here, and
`where` turns pydantic's location into the file's: the table, the index from 0, the name.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

REFUSED = "catalog"
"""The error type of every check written here."""

Loc = tuple[int | str, ...]

_TOML_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a float",
    list: "an array",
    dict: "a table",
}

_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "tuple_type": "an array of strings",  # every array inside an entry holds strings
    "frozen_set_type": "an array of strings",
}
"""What a field wanted, by pydantic's error type, when the value found had another type."""


def refuse(*messages: str, at: str | None = None) -> PydanticCustomError:
    """One field's problems (one line each) as a pydantic error. `at` names the field when
    the check is the entry's own (a model validator's location is the entry)."""
    context = {"message": messages[0], "all": messages, "at": () if at is None else (at,)}
    return PydanticCustomError(REFUSED, "{message}", context)


def describe(value: Any) -> str:
    """Say what was found in TOML's words, with the value when short, so the fix is obvious."""
    kind = _TOML_TYPE_NAMES.get(type(value), "a date/time")
    shown = repr(value)
    return f"{kind} ({shown})" if len(shown) <= 40 else kind


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def entry_name(entry: object) -> str | None:
    """The name an entry gives itself, even when the rest of it is broken."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def entry_label(section: str, index: int, entry: object) -> str:
    name = entry_name(entry)
    return f"{section}[{index}]" if name is None else f"{section}[{index}] '{name}'"


def where(loc: Loc, data: Any) -> str:
    """`top level`, `top level: field 'models'`, `embeds[0]`, or
    `configurations[1] 'c': field 'criteria.capabilities[0]'`."""
    if len(loc) < 2:
        return "top level" + "".join(f": field '{part}'" for part in loc)
    section, index, *rest = loc
    label = entry_label(str(section), int(index), data[section][index])
    if not rest:
        return label
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in rest)
    return f"{label}: field '{field.lstrip('.')}'"


def problem_lines(exc: ValidationError, data: Any, shape: type[BaseModel], source: str) -> list[str]:
    """Every error of validating `data` (the whole file, of type `shape`) as one line each."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = (*error["loc"], *(error.get("ctx") or {}).get("at", ()))
        lines += [f"{source}: {where(loc, data)}: {text}" for text in _texts(error, loc, shape)]
    return lines


def _texts(error: ErrorDetails, loc: Loc, shape: type[BaseModel]) -> Iterable[str]:
    kind, found, ctx = error["type"], error["input"], error.get("ctx") or {}
    if kind == REFUSED:
        return tuple(ctx["all"])
    if kind == "extra_forbidden":
        hint = did_you_mean(str(loc[-1]), _keys(shape, loc))
        if len(loc) == 1:
            hint += "; expected [[providers]], [[models]], [[configurations]] or [[embeds]]"
        return (f"unknown key{hint}",)
    if kind == "model_type":
        wanted = "a table" if not loc else f"a table ([[{loc[0]}]])"
        wanted = wanted if len(loc) < 3 else 'a table such as { capabilities = ["chat"] }'
        return (f"expected {wanted}, got {describe(found)}",)
    if kind == "list_type":  # only a section is a list: the arrays in entries are tuples, sets
        return (f"expected an array of tables ([[{loc[0]}]]), got {describe(found)}",)
    if kind == "too_short":  # only [[configurations]] has a minimum
        return ("no [[configurations]]: declare at least one (the first is the default)",)
    if kind in ("greater_than", "greater_than_equal"):
        bound = "greater than" if kind == "greater_than" else "at least"
        limit = ctx["gt"] if kind == "greater_than" else ctx["ge"]
        return (f"must be {bound} {limit:g}, got {found:g}",)
    if kind == "missing":
        return ("required field is missing",)
    if kind == "finite_number":
        return (f"must be a finite number, got {found}",)
    if kind in _EXPECTED:
        return (f"expected {_EXPECTED[kind]}, got {describe(found)}",)
    return (error["msg"],)


def _keys(shape: type[BaseModel], loc: Loc) -> Collection[str]:
    """The keys known where an unknown one was found: follow the tables named on the way."""
    model = shape
    for part in loc[:-1]:
        if isinstance(part, str):
            annotation = model.model_fields[part].annotation
            model = next(t for t in (*get_args(annotation), annotation) if _is_table(t))
    return model.model_fields


def _is_table(kind: object) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)
