"""Checks of single values that pydantic's constraints cannot say. Each raises ValueError
with one line per problem, in words that say what to write instead."""

from __future__ import annotations

import difflib
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

CAPABILITIES = ("chat", "completion", "embedding", "tools", "vision")
"""What routing can ask of a model. Anything else is a typo that would silently never match."""
TOKENIZERS = ("auto", "server", "estimate", "tiktoken", "huggingface")
"""How a model's tokens are counted: the last two take an argument after a colon."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def capabilities(values: frozenset[str]) -> frozenset[str]:
    if unknown := sorted(values.difference(CAPABILITIES)):
        known = ", ".join(CAPABILITIES)
        hints = (f"'{value}'{did_you_mean(value, CAPABILITIES)}" for value in unknown)
        raise ValueError(*(f"unknown capability {hint}; known: {known}" for hint in hints))
    return values


def _split(value: str) -> SplitResult | None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return None
    return parts


def url(value: str) -> str:
    if (parts := _split(value)) is None:
        raise ValueError(f"'{value}' is not a valid URL")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"must be an http:// or https:// URL, got '{value}'")
    if not parts.hostname:
        raise ValueError(f"'{value}' has no host")
    return value.rstrip("/")


def origins(values: tuple[str, ...]) -> tuple[str, ...]:
    """Each exactly scheme://host[:port]: what a browser compares for frame-ancestors."""
    problems, sites = [], "list each site that may embed the chat, such as 'https://example.com'"
    for origin in values:
        parts, no = _split(origin), f"'{origin}' is not an origin"
        if "*" in origin:
            problems.append(f"'{origin}': wildcards are not allowed; {sites}")
        elif parts and parts.scheme not in ("http", "https"):
            problems.append(f"{no}: it must start with http:// or https://")
        elif not parts or not parts.hostname or re.search(r"[@\s]", origin):
            problems.append(f"{no} (scheme://host[:port])")
        elif origin.lower() != (expected := f"{parts.scheme}://{parts.netloc}").lower():
            problems.append(f"{no}: drop the path, query or fragment and use '{expected}'")
    if problems:
        raise ValueError(*problems)
    return values


def split_tokenizer(setting: str) -> tuple[str, str]:
    """("tiktoken", "cl100k_base") from "tiktoken:cl100k_base"; ("auto", "") from "auto":
    the one place that reads a setting's shape, for the validator and the registry alike."""
    kind, _, argument = setting.partition(":")
    return kind, argument


def tokenizer(setting: str, *, demo: bool, folder: Path) -> str:
    """The setting as the registry reads it (a huggingface path made absolute). Checked at
    start, not at the first send: a missing package or file should stop the app with the
    entry named, not quietly count with the estimate."""
    kind, argument = split_tokenizer(setting.strip())
    if kind not in TOKENIZERS:
        examples = "'auto', 'server', 'estimate', 'tiktoken:<encoding>' or 'huggingface:<path>'"
        hint = did_you_mean(kind, TOKENIZERS)
        raise ValueError(f"unknown tokenizer '{setting}'{hint}; expected {examples}")
    if kind in ("auto", "server", "estimate"):
        if argument:
            raise ValueError(f"'{kind}' takes no argument, got '{setting}'")
        if kind == "server" and demo:
            raise ValueError("the demo provider has no tokenize endpoint; use 'estimate'")
        return kind
    tiktoken = kind == "tiktoken"
    if not argument.strip():
        example = (
            "'tiktoken:cl100k_base'" if tiktoken else "'huggingface:models/qwen/tokenizer.json'"
        )
        needs = "an encoding" if tiktoken else "the path of a tokenizer.json"
        raise ValueError(f"'{kind}:' needs {needs}, e.g. {example}")
    package, extra = ("tiktoken", "tiktoken") if tiktoken else ("tokenizers", "huggingface")
    if importlib.util.find_spec(package) is None:
        missing = f"needs the '{package}' package, which is not installed"
        raise ValueError(f"{missing}: pip install 'webapp[{extra}]'")
    if tiktoken:
        import tiktoken as encodings  # only names are checked: the registry loads the vocabulary

        known = [name for name in encodings.list_encoding_names() if not name.endswith("_offline")]
        if argument not in known:
            hint = f"{did_you_mean(argument, known)}; known: {', '.join(known)}"
            raise ValueError(f"unknown tiktoken encoding '{argument}'{hint}")
        return setting
    path = Path(argument).expanduser()
    path = (path if path.is_absolute() else folder / path).resolve()
    if not path.is_file():
        raise ValueError(f"tokenizer file not found: {path}")
    return f"huggingface:{path}"
