"""Providers, models, configurations and embeds, loaded from one TOML file.

The catalog is read once at start. A bad file must stop the app with a message a person
can act on, so validation never stops at the first problem: each entry is validated on its
own (references against the valid entries of the sections before it) and every problem
becomes one line, `<file>: <entry>: field '<field>': <message>`, worded here and nowhere
else. Without a file, the built-in demo lets a fresh checkout chat with no network or key.
"""

import os
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from webapp.llm.catalog.models import DEFAULT_WINDOW as DEFAULT_WINDOW
from webapp.llm.catalog.models import DEMO_WINDOW as DEMO_WINDOW
from webapp.llm.catalog.models import EMBED_NAME, ENV_NAME, SECTIONS, Reading
from webapp.llm.catalog.models import Catalog as Catalog
from webapp.llm.catalog.models import ConfigurationSpec as ConfigurationSpec
from webapp.llm.catalog.models import Criteria as Criteria
from webapp.llm.catalog.models import EmbedSpec as EmbedSpec
from webapp.llm.catalog.models import McpServerSpec as McpServerSpec
from webapp.llm.catalog.models import ModelSpec as ModelSpec
from webapp.llm.catalog.models import ProviderSpec as ProviderSpec
from webapp.llm.did_you_mean import did_you_mean

_EXPECTED = {"string_type": "a string", "int_type": "an integer", "float_type": "a number"}
_EXPECTED |= {"bool_type": "true or false", "model_type": "a table"}
_EXPECTED |= dict.fromkeys(("tuple_type", "frozen_set_type"), "an array of strings")
"""What a field wanted, by pydantic's error type (every array inside an entry holds strings)."""
_TEXTS = {
    "missing": "required field is missing",
    "too_short": "must list at least one",
    "finite_number": "must be a finite number, got {input}",
    "greater_than": "must be greater than {gt:g}, got {input:g}",
    "greater_than_equal": "must be at least {ge:g}, got {input:g}",
    "less_than_equal": "must be at most {le:g}, got {input:g}",
    r"\S": "must not be empty",
    EMBED_NAME: "'{input}' is used in the URL /embed/{{name}}: use only letters, digits, "
    "'.', '_' and '-'",
    ENV_NAME: "is not an environment variable name: put the NAME of the environment variable here "
    '(e.g. api_key_env = "OPENAI_API_KEY") and the key itself in that variable',
}
"""The words for pydantic's other error types, and for each pattern a string must match."""
_WORDS = {str: "a string", bool: "a boolean", int: "an integer", float: "a float"}
_WORDS |= {list: "an array", dict: "a table"}
_DEMO = resources.files(__name__) / "demo.toml"
"""The offline demo, a catalog file shipped in the package and read like any other."""


class CatalogError(Exception):
    """The catalog file is unusable. `errors` holds one line per problem, each naming the file."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source, self.errors, count = source, list(errors), len(errors)
        header = f"invalid catalog {source}: {count} problem{'' if count == 1 else 's'}"
        super().__init__("\n".join([header, *self.errors]))


def builtin_catalog() -> Catalog:
    """The catalog used when no file is configured: the offline demo, nothing else."""
    with resources.as_file(_DEMO) as path:
        return load_catalog(path).model_copy(update={"source": None})


def load_catalog(path: str | os.PathLike[str] | None) -> Catalog:
    """Read and validate a catalog file; None means the built-in demo catalog."""
    if path is None:
        return builtin_catalog()
    source = os.fspath(path)
    return parse_catalog(_read_toml(source), source)


def parse_catalog(data: object, source: str) -> Catalog:
    """Validate already-parsed TOML; raise CatalogError listing every problem found."""
    if not isinstance(data, dict):
        raise CatalogError(source, [f"{source}: top level: expected a table, got {describe(data)}"])
    tables = {section: data.get(section, []) for section in SECTIONS}
    entries = {section: t if isinstance(t, list) else [] for section, t in tables.items()}
    names = {section: [n for e in table if (n := _name(e))] for section, table in entries.items()}
    reading, first = Reading(Path(source).resolve().parent, names), dict[tuple[str, str], str]()
    known = "; expected " + ", ".join(f"[[{section}]]" for section in SECTIONS)
    hints = {key: did_you_mean(key, SECTIONS) for key in data if key not in SECTIONS}
    lines = [f"top level: field '{key}': unknown key{hint}{known}" for key, hint in hints.items()]
    for section, spec in SECTIONS.items():
        if entries[section] is not tables[section]:
            found = f"([[{section}]]), got {describe(tables[section])}"
            lines.append(f"top level: field '{section}': expected an array of tables {found}")
        for index, entry in enumerate(entries[section]):
            label = f"{section}[{index}]" + (f" '{name}'" if (name := _name(entry)) else "")
            problems = []
            if name and (earlier := first.setdefault((section, name), label)) != label:
                problems.append(
                    f"{label}: field 'name': duplicate name '{name}' (already used by {earlier})"
                )
            try:
                valid = spec.model_validate(entry, context=reading)
            except ValidationError as exc:
                problems += [line for e in exc.errors() for line in _lines(section, label, e, spec)]
            if problems:
                reading.broken.add(section)
                lines += problems
            else:
                reading.valid[section][valid.name] = valid
    if tables["configurations"] == []:
        no = "no [[configurations]]: declare at least one (the first is the default)"
        lines.append(f"top level: field 'configurations': {no}")
    if lines:
        raise CatalogError(source, [f"{source}: {line}" for line in lines])
    return Catalog.model_validate({**{s: reading.valid[s] for s in SECTIONS}, "source": source})


def _name(entry: object) -> str | None:
    """The name an entry gives itself, even when the rest of it is broken."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def describe(value: Any) -> str:
    """What was found, in TOML's words, with the value when short, so the fix is obvious."""
    shown, kind = repr(value), _WORDS.get(type(value), "a date/time")
    return f"{kind} ({shown})" if len(shown) <= 40 else kind


def _lines(section: str, label: str, error: ErrorDetails, spec: type[BaseModel]) -> list[str]:
    """`models[2] 'x': field 'capabilities[1]': expected a string, got an integer (1)`."""
    kind, loc, found, ctx = error["type"], error["loc"], error["input"], error.get("ctx", {})
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    where = f"{label}: field '{path[1:]}'" if loc else label
    if kind == "value_error":
        return [f"{where}: {text}" for text in ctx["error"].args]
    if kind == "extra_forbidden":
        for part in loc[:-1]:  # the keys known where the unknown one is: follow the tables
            kinds = get_args(spec.model_fields[str(part)].annotation)
            spec = next(k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel))
        return [f"{where}: unknown key{did_you_mean(str(loc[-1]), spec.model_fields)}"]
    if kind == "literal_error" and isinstance(found, str):
        hint = did_you_mean(found, re.findall(r"'([^']*)'", ctx["expected"]))
        noun = "capability" if "capabilities" in loc else f"{section[:-1]} {loc[-1]}"
        what = f"unknown {noun} '{found}'{hint}"
        return [f"{where}: {what}; expected {ctx['expected']}"]
    if kind in _EXPECTED or kind == "literal_error":
        wanted = _EXPECTED.get(kind, ctx.get("expected")) if loc else f"a table ([[{section}]])"
        return [f"{where}: expected {wanted}, got {describe(found)}"]
    text = _TEXTS.get(ctx.get("pattern", kind))
    return [f"{where}: {text.format(input=found, **ctx) if text else error['msg']}"]


def _read_toml(source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(source).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        problem = "file not found"
    except IsADirectoryError:
        problem = "is a directory, not a TOML file"
    except OSError as exc:
        problem = f"cannot read file: {exc.strerror or exc}"
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text (bad byte at offset {exc.start})"
    except tomllib.TOMLDecodeError as exc:  # name the line up front, not at the end
        at = re.search(r"\s*\((?:at line (\d+), column \d+|at end of document)\)$", str(exc))
        where = f"line {at.group(1)}" if at and at.group(1) else "end of file"
        problem = f"{where}: TOML syntax error: {str(exc)[: at.start()] if at else exc}"
    raise CatalogError(source, [f"{source}: {problem}"])
