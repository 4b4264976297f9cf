"""Error lines in one style, `<file>: <entry>: field '<field>': <message>`, so that every
problem says where it is. The catalog's checks raise `refuse(...)`, shown as written;
pydantic's own errors (types, ranges, required and unknown keys) are put in the same words.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

Loc = tuple[int | str, ...]

_WORDS: dict[type, str] = {
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
    "tuple_type": "an array of strings",
    "frozen_set_type": "an array of strings",
}
"""What a field wanted, by pydantic's error type (every array inside an entry holds strings)."""


def refuse(*messages: str) -> PydanticCustomError:
    """A check's problems, one line each."""
    return PydanticCustomError("catalog", "{message}", {"message": messages[0], "all": messages})


def with_problems(
    exc: ValidationError | None, first: list[tuple[str, str]], last: list[tuple[str, str]]
) -> ValidationError:
    """An entry's errors with its own problems, (field, message), ahead of and after them."""

    def own(problems: list[tuple[str, str]]) -> list[InitErrorDetails]:
        return [{"type": refuse(text), "loc": (at,), "input": None} for at, text in problems]

    again: list[Any] = [] if exc is None else exc.errors()
    for index, error in enumerate(again):  # pydantic's errors go back by type name, ours as such
        if error["type"] == "catalog":
            again[index] = {**error, "type": refuse(*error["ctx"]["all"])}
    return ValidationError.from_exception_data("entry", [*own(first), *again, *own(last)])


def describe(value: Any) -> str:
    """What was found, in TOML's words, with the value when short, so the fix is obvious."""
    shown = repr(value)
    kind = _WORDS.get(type(value), "a date/time")
    return f"{kind} ({shown})" if len(shown) <= 40 else kind


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def entry_name(entry: object) -> str | None:
    """The name an entry gives itself, even when the rest of it is broken."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def where(loc: Loc, data: Any) -> str:
    """`top level`, `top level: field 'models'`, `models[2] 'x'` (the table, the index from
    0, the name), `configurations[1] 'c': field 'criteria.capabilities[0]'`."""
    if len(loc) < 2:
        return "top level" + "".join(f": field '{part}'" for part in loc)
    section, index, *rest = loc
    name = entry_name(data[section][index])
    label = f"{section}[{index}]" + (f" '{name}'" if name else "")
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in rest)
    return f"{label}: field '{field[1:]}'" if rest else label


def problem_lines(
    exc: ValidationError, data: Any, shape: type[BaseModel], source: str
) -> list[str]:
    """Every error of validating `data` (the whole file, as `shape`), one line each."""
    lines = []
    for error in sorted(exc.errors(include_url=False), key=_order):
        loc = error["loc"]
        lines += [f"{source}: {where(loc, data)}: {text}" for text in _texts(error, loc, shape)]
    return lines


def _order(error: ErrorDetails) -> int:
    """Unknown top-level keys first (a misspelt section explains the rest), the missing
    [[configurations]] last, the entries in file order between them."""
    if len(error["loc"]) != 1:
        return 1
    return {"extra_forbidden": 0, "too_short": 2}.get(error["type"], 1)


def _texts(error: ErrorDetails, loc: Loc, shape: type[BaseModel]) -> Iterable[str]:
    kind, found, ctx = error["type"], error["input"], error.get("ctx") or {}
    if kind == "catalog":
        return tuple(ctx["all"])
    if kind == "extra_forbidden":
        hint = did_you_mean(str(loc[-1]), _keys(shape, loc))
        tables = "; expected [[providers]], [[models]], [[configurations]] or [[embeds]]"
        return (f"unknown key{hint}{tables if len(loc) == 1 else ''}",)
    if kind == "model_type":
        wanted = f"a table ([[{loc[0]}]])" if loc else "a table"
        wanted = 'a table such as { capabilities = ["chat"] }' if len(loc) > 2 else wanted
        return (f"expected {wanted}, got {describe(found)}",)
    if kind == "list_type":  # only a section is a list: an entry's arrays are tuples or sets
        return (f"expected an array of tables ([[{loc[0]}]]), got {describe(found)}",)
    if kind == "too_short":  # only [[configurations]] has a minimum
        return ("no [[configurations]]: declare at least one (the first is the default)",)
    if kind in ("greater_than", "greater_than_equal"):
        bound = "greater than" if kind == "greater_than" else "at least"
        return (f"must be {bound} {ctx.get('gt', ctx.get('ge')):g}, got {found:g}",)
    if kind == "string_pattern_mismatch":  # only Text has a pattern
        return ("must not be empty",)
    if kind == "missing":
        return ("required field is missing",)
    if kind == "finite_number":
        return (f"must be a finite number, got {found}",)
    if kind in _EXPECTED:
        return (f"expected {_EXPECTED[kind]}, got {describe(found)}",)
    return (error["msg"],)


def _keys(shape: type[BaseModel], loc: Loc) -> Collection[str]:
    """The keys known where an unknown one was found: follow the tables named on the way."""
    for part in loc[:-1]:
        if isinstance(part, str):
            kinds = get_args(shape.model_fields[part].annotation)
            shape = next(k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel))
    return shape.model_fields
