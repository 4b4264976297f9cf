"""Reading the catalog file: one kind of failure, CatalogError, listing every problem.

A missing file, bad UTF-8 and TOML syntax (with its line) are reported like the entries'
problems, so start-up has one thing to print.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from webapp.llm.catalog.messages import problem_lines
from webapp.llm.catalog.models import Catalog, CatalogFile, Reading


class CatalogError(Exception):
    """The catalog file is unusable. `errors` holds one line per problem, each naming the file."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = list(errors)
        count = len(self.errors)
        header = f"invalid catalog {source}: {count} problem{'' if count == 1 else 's'}"
        super().__init__("\n".join([header, *self.errors]))


_BUILTIN = '''
[[providers]]
name = "demo"
kind = "demo"

[[models]]
name = "demo"
provider = "demo"
max_output_tokens = 256
capabilities = ["chat", "completion", "tools"]

[[configurations]]
name = "demo"
model = "demo"
system_prompt = """
You are the offline demo model of a self-hosted chat app. \\
Be brief and friendly, and say plainly that you are a demo."""
'''
"""The offline demo, read like any file (its window and tokenizer are the demo's defaults)."""


def builtin_catalog() -> Catalog:
    """The catalog used when no file is configured: the offline demo, nothing else."""
    return parse_catalog(tomllib.loads(_BUILTIN), "built-in").model_copy(update={"source": None})


def load_catalog(path: str | os.PathLike[str] | None) -> Catalog:
    """Read and validate a catalog file; None means the built-in demo catalog."""
    if path is None:
        return builtin_catalog()
    source = os.fspath(path)
    return parse_catalog(_read_toml(source), source)


def parse_catalog(data: object, source: str) -> Catalog:
    """Validate already-parsed TOML; raise CatalogError listing every problem found."""
    reading = Reading(Path(source).resolve().parent, data if isinstance(data, dict) else {})
    try:
        file = CatalogFile.model_validate(data, context=reading)
    except ValidationError as exc:
        raise CatalogError(source, problem_lines(exc, data, CatalogFile, source)) from None
    tables = {section: getattr(file, section) for section in CatalogFile.model_fields}
    by_name = {section: {e.name: e for e in entries} for section, entries in tables.items()}
    return Catalog.model_validate({**by_name, "source": source})


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
    except tomllib.TOMLDecodeError as exc:
        problem = _syntax_error(str(exc))
    raise CatalogError(source, [f"{source}: {problem}"])


def _syntax_error(message: str) -> str:
    """Name the line up front: tomllib only tucks it at the end of its message."""
    at = re.search(r"\s*\((?:at line (\d+), column \d+|at end of document)\)$", message)
    where = f"line {at.group(1)}" if at and at.group(1) else "end of file"
    return f"{where}: TOML syntax error: {message[: at.start()] if at else message}"
