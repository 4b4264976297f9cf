"""Checks of single values that pydantic's constraints cannot say. Each raises ValueError
with one line per problem, in words that say what to write instead."""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit


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
