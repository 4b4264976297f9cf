"""A message's pictures as OpenAI-shaped parts, the shape the whole pipeline speaks: until
the answer is sent a part names its stored file (`FILE_REF`), so a transcript holds no
picture's bytes while it is loaded and fitted; `answering.pictures` puts each picture in
its part, scaled, as a data URL, when the send goes out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FILE_REF = "webapp-file:"


def picture_parts(text: str, file_ids: Sequence[str]) -> list[dict[str, Any]]:
    """A message's text, then a part for each picture (by file id)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts += [{"type": "image_url", "image_url": {"url": FILE_REF + i}} for i in file_ids]
    return parts


def referenced(content: object) -> list[str]:
    """The file ids a message's parts name."""
    if not isinstance(content, list):
        return []
    return [
        url.removeprefix(FILE_REF)
        for part in content
        if isinstance(part, dict) and part.get("type") == "image_url"
        for url in [str((part.get("image_url") or {}).get("url", ""))]
        if url.startswith(FILE_REF)
    ]


def with_urls(content: object, urls: dict[str, str]) -> object:
    """The parts with each named file's part pointing at its URL instead."""
    if not isinstance(content, list):
        return content
    swapped = []
    for part in content:
        url = str((part.get("image_url") or {}).get("url", "")) if isinstance(part, dict) else ""
        if url.startswith(FILE_REF):
            file_id = url.removeprefix(FILE_REF)
            found = urls.get(file_id)
            part = (
                {"type": "image_url", "image_url": {"url": found}}
                if found
                else {"type": "text", "text": "[a picture that is no longer stored]"}
            )
        swapped.append(part)
    return swapped
