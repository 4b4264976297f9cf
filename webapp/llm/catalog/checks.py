"""Checks of single values, each saying in the file's words why the value cannot be used.

Each runs as a field validator of the specs (models.py), so its problem is reported with
the entry and field it came from.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from urllib.parse import urlsplit

from webapp.llm.catalog.messages import did_you_mean, refuse

KNOWN_CAPABILITIES = frozenset({"chat", "tools", "vision", "completion", "embedding"})
"""What routing can ask of a model. Anything else is a typo that would silently never match."""

TOKENIZER_KINDS: tuple[str, ...] = ("auto", "server", "estimate", "tiktoken", "huggingface")
"""How a model's tokens are counted: the first three stand alone, the last two take an
argument after a colon ("tiktoken:cl100k_base", "huggingface:path/to/tokenizer.json")."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EMBED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def not_blank(value: str) -> str:
    """An empty name or URL is a mistake, not a value."""
    if not value.strip():
        raise refuse("must not be empty")
    return value


def known_capabilities(values: frozenset[str]) -> frozenset[str]:
    known = ", ".join(sorted(KNOWN_CAPABILITIES))
    unknown = [
        f"unknown capability '{value}'{did_you_mean(value, KNOWN_CAPABILITIES)}; known: {known}"
        for value in sorted(values - KNOWN_CAPABILITIES)
    ]
    if unknown:
        raise refuse(*unknown)
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
    if not values:
        raise refuse("must list at least one origin, such as 'https://example.com'")
    problems = [problem for problem in map(_origin_problem, values) if problem]
    if problems:
        raise refuse(*problems)
    return values


def _origin_problem(origin: str) -> str | None:
    """An origin is exactly scheme://host[:port]: what a browser compares for frame-ancestors."""
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
    if not _EMBED_NAME.fullmatch(name):
        raise refuse(
            f"'{name}' is used in the URL /embed/{{name}}: use only letters, "
            "digits, '.', '_' and '-'"
        )
    return name


def api_key_env(value: str) -> str:
    """The file names the variable; the key stays in the environment, out of files and logs.

    The value is never echoed: if it is a secret, the error message must not leak it.
    """
    hint = 'put the NAME of the environment variable there (e.g. api_key_env = "OPENAI_API_KEY")'
    if value.startswith("sk-"):
        raise refuse(
            f"looks like an API key itself, not a variable name; {hint} "
            "and set that variable to the key"
        )
    if not _ENV_NAME.fullmatch(value):
        raise refuse(f"is not an environment variable name; {hint}")
    return value


def split_tokenizer(setting: str) -> tuple[str, str]:
    """("tiktoken", "cl100k_base") from "tiktoken:cl100k_base"; ("auto", "") from "auto".

    The one place that reads a setting's shape, for the validator and the registry alike.
    """
    kind, _, argument = setting.partition(":")
    return kind, argument


def tokenizer(setting: str, *, demo: bool, folder: Path) -> str:
    """The `tokenizer` setting, validated; a huggingface path is made absolute.

    Checked here, at start, rather than at the first send: a missing package or file
    should stop the app with the entry named, not quietly count with the estimate.
    """
    kind, argument = split_tokenizer(setting.strip())
    examples = "'auto', 'server', 'estimate', 'tiktoken:<encoding>' or 'huggingface:<path>'"
    if kind not in TOKENIZER_KINDS:
        hint = did_you_mean(kind, TOKENIZER_KINDS)
        raise refuse(f"unknown tokenizer '{setting}'{hint}; expected {examples}")
    if kind in ("auto", "server", "estimate"):
        if argument:
            raise refuse(f"'{kind}' takes no argument, got '{setting}'")
        if kind == "server" and demo:
            raise refuse("the demo provider has no tokenize endpoint; use 'estimate'")
        return kind
    if not argument.strip():
        what = (
            "an encoding, e.g. 'tiktoken:cl100k_base'"
            if kind == "tiktoken"
            else "the path of a tokenizer.json, e.g. 'huggingface:models/qwen/tokenizer.json'"
        )
        raise refuse(f"'{kind}:' needs {what}")
    if kind == "tiktoken":
        _tiktoken_encoding(argument)
        return setting
    if importlib.util.find_spec("tokenizers") is None:
        raise refuse(
            "needs the 'tokenizers' package, which is not installed: "
            "pip install 'webapp[huggingface]'"
        )
    path = Path(argument).expanduser()
    path = (path if path.is_absolute() else folder / path).resolve()
    if not path.is_file():
        raise refuse(f"tokenizer file not found: {path}")
    return f"huggingface:{path}"


def _tiktoken_encoding(encoding: str) -> None:
    """Only names are checked here (no download); the registry loads the vocabulary."""
    if importlib.util.find_spec("tiktoken") is None:
        raise refuse(
            "needs the 'tiktoken' package, which is not installed: pip install 'webapp[tiktoken]'"
        )
    import tiktoken

    known = [name for name in tiktoken.list_encoding_names() if not name.endswith("_offline")]
    if encoding not in known:
        hint = did_you_mean(encoding, known)
        raise refuse(f"unknown tiktoken encoding '{encoding}'{hint}; known: {', '.join(known)}")
