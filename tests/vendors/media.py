"""Pictures and documents in a prompt, as the two vendors take them: Anthropic's `image`
and `document` blocks (a base64 `source` of a type it reads, a plain-text source, or a
URL) and Gemini's `inlineData` parts, each refused the way its API refuses a bad one, and
counted by the vendor's published rule."""

from __future__ import annotations

import base64
import binascii
import math
from io import BytesIO
from typing import Any

from PIL import Image

from tests.vendors.faults import _Invalid as Invalid

PICTURE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _decoded(data: Any, where: str) -> bytes:
    """Base64, standard or URL-safe (Google's SDK sends the latter; both APIs take both)."""
    text = str(data).replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"{where}.data: invalid base64 data") from None


def picture_or_document(kind: str, source: Any, where: str) -> bytes | str:
    """A block's content: a picture's bytes, a document's bytes or text."""
    if not isinstance(source, dict):
        raise Invalid(f"{where}: Field required")
    shape = source.get("type")
    if shape == "url":
        return str(source.get("url") or "")
    if kind == "document" and shape == "text":
        return str(source.get("data") or "")
    allowed = PICTURE_TYPES if kind == "image" else ("application/pdf",)
    if shape != "base64" or source.get("media_type") not in allowed:
        raise Invalid(f"{where}.media_type: Input should be {' or '.join(allowed)}")
    return _decoded(source.get("data"), where)


def _size(data: bytes | str) -> tuple[int, int]:
    if isinstance(data, str):
        return 768, 768  # a URL the fake does not fetch: a generous stand-in
    with Image.open(BytesIO(data)) as picture:
        return picture.size


def picture_tokens(data: bytes | str) -> int:
    """Anthropic's rule: width x height / 750 (the fake does not scale)."""
    width, height = _size(data)
    return math.ceil(width * height / 750)


def inline_picture(inline: Any, where: str) -> bytes:
    if not isinstance(inline, dict) or not (inline.get("mimeType") or inline.get("mime_type")):
        raise Invalid(f"* {where}.inline_data.mime_type: a mime type is required")
    return _decoded(inline.get("data"), f"* {where}.inline_data")


def gemini_picture_tokens(data: bytes) -> int:
    """Gemini's rule: 258 for a small picture, else 258 for each 768-pixel tile."""
    width, height = _size(data)
    if width <= 384 and height <= 384:
        return 258
    return 258 * math.ceil(width / 768) * math.ceil(height / 768)
