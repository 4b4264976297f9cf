"""Checks of single values, run as the specs' field validators so that each problem is
reported with its entry and field, in words that say what to write instead."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from urllib.parse import urlsplit

from webapp.llm.catalog.messages import did_you_mean, refuse

KNOWN_CAPABILITIES = frozenset({"chat", "tools", "vision", "completion", "embedding"})
"""What routing can ask of a model. Anything else is a typo that would silently never match."""

TOKENIZER_KINDS = ("auto", "server", "estimate", "tiktoken", "huggingface")
"""How a model's tokens are counted: the last two take an argument after a colon."""


def capabilities(values: frozenset[str]) -> frozenset[str]:
    known = ", ".join(sorted(KNOWN_CAPABILITIES))
    unknown = sorted(values - KNOWN_CAPABILITIES)
    if unknown:
        hints = [f"'{value}'{did_you_mean(value, KNOWN_CAPABILITIES)}" for value in unknown]
        raise refuse(*(f"unknown capability {hint}; known: {known}" for hint in hints))
    return values


def url(value: str) -> str:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise refuse(f"'{value}' is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise refuse(f"must be an http:// or https:// URL, got '{value}'")
    if not parts.hostname:
        raise refuse(f"'{value}' has no host")
    return value.rstrip("/")


def origins(values: tuple[str, ...]) -> tuple[str, ...]:
    """Each exactly scheme://host[:port]: what a browser compares for frame-ancestors."""
    if not values:
        raise refuse("must list at least one origin, such as 'https://example.com'")
    problems = [problem for problem in map(_origin_problem, values) if problem]
    if problems:
        raise refuse(*problems)
    return values


def _origin_problem(origin: str) -> str | None:
    if "*" in origin:
        return (
            f"'{origin}': wildcards are not allowed; list each site that may embed the chat, "
            "such as 'https://example.com'"
        )
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return f"'{origin}' is not an origin (scheme://host[:port])"
    if parts.scheme not in ("http", "https"):
        return f"'{origin}' is not an origin: it must start with http:// or https://"
    if not parts.hostname or parts.username is not None or any(c.isspace() for c in origin):
        return f"'{origin}' is not an origin (scheme://host[:port])"
    expected = f"{parts.scheme}://{parts.netloc}"
    if origin.lower() != expected.lower():
        return f"'{origin}' is not an origin: drop the path, query or fragment and use '{expected}'"
    return None


def embed_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise refuse(
            f"'{name}' is used in the URL /embed/{{name}}: use only letters, "
            "digits, '.', '_' and '-'"
        )
    return name


def api_key_env(value: str) -> str:
    """The file names the variable; the key stays in the environment, out of files and logs.
    The value is never echoed: if it is a secret, the error message must not leak it."""
    hint = 'put the NAME of the environment variable there (e.g. api_key_env = "OPENAI_API_KEY")'
    if value.startswith("sk-"):
        raise refuse(
            f"looks like an API key itself, not a variable name; {hint} "
            "and set that variable to the key"
        )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise refuse(f"is not an environment variable name; {hint}")
    return value


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
    if kind not in TOKENIZER_KINDS:
        examples = "'auto', 'server', 'estimate', 'tiktoken:<encoding>' or 'huggingface:<path>'"
        hint = did_you_mean(kind, TOKENIZER_KINDS)
        raise refuse(f"unknown tokenizer '{setting}'{hint}; expected {examples}")
    if kind in ("auto", "server", "estimate"):
        if argument:
            raise refuse(f"'{kind}' takes no argument, got '{setting}'")
        if kind == "server" and demo:
            raise refuse("the demo provider has no tokenize endpoint; use 'estimate'")
        return kind
    if not argument.strip():
        if kind == "tiktoken":
            raise refuse("'tiktoken:' needs an encoding, e.g. 'tiktoken:cl100k_base'")
        example = "'huggingface:models/qwen/tokenizer.json'"
        raise refuse(f"'huggingface:' needs the path of a tokenizer.json, e.g. {example}")
    package = "tiktoken" if kind == "tiktoken" else "tokenizers"
    if importlib.util.find_spec(package) is None:
        extra = "tiktoken" if kind == "tiktoken" else "huggingface"
        raise refuse(
            f"needs the '{package}' package, which is not installed: pip install 'webapp[{extra}]'"
        )
    if kind == "tiktoken":
        import tiktoken  # only names are checked (no download): the registry loads the vocabulary

        known = [name for name in tiktoken.list_encoding_names() if not name.endswith("_offline")]
        if argument not in known:
            hint = did_you_mean(argument, known)
            raise refuse(f"unknown tiktoken encoding '{argument}'{hint}; known: {', '.join(known)}")
        return setting
    path = Path(argument).expanduser()
    path = (path if path.is_absolute() else folder / path).resolve()
    if not path.is_file():
        raise refuse(f"tokenizer file not found: {path}")
    return f"huggingface:{path}"
