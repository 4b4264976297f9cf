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
from webapp.llm.catalog.models import (
    DEMO_WINDOW,
    Catalog,
    CatalogFile,
    ConfigurationSpec,
    ModelSpec,
    ProviderSpec,
    Reading,
)


class CatalogError(Exception):
    """The catalog file is unusable. `errors` holds one line per problem, each naming the file."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = list(errors)
        count = len(self.errors)
        header = f"invalid catalog {source}: {count} problem{'' if count == 1 else 's'}"
        super().__init__("\n".join([header, *self.errors]))


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
    )


def load_catalog(path: str | os.PathLike[str] | None) -> Catalog:
    """Read and validate a catalog file; None means the built-in demo catalog."""
    if path is None:
        return builtin_catalog()
    source = os.fspath(path)
    return parse_catalog(_read_toml(source), source)


def parse_catalog(data: object, source: str) -> Catalog:
    """Validate already-parsed TOML; raise CatalogError listing every problem found."""
    folder = Path(source).resolve().parent
    reading = Reading.of(data if isinstance(data, dict) else {}, folder)
    try:
        file = CatalogFile.model_validate(data, context=reading)
    except ValidationError as exc:
        raise CatalogError(source, problem_lines(exc, data, CatalogFile, source)) from None
    return file.catalog(source)


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
