"""Pictures in a gateway call, bounded as the chat bounds them (docs/design.md section
12): each OpenAI `image_url` part given as a data URL is sized from its header (the
first bytes of its data, decoded on the spot: a header, never the pixels), and costs the
costliest rule among the route's models; a picture whose size cannot be read (a web
address, a header past the first bytes) is counted as the largest any provider reads."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from io import BytesIO

from PIL import Image, UnidentifiedImageError

from webapp.chat.sending.files import costliest
from webapp.llm.catalog import Catalog
from webapp.llm.estimator import estimate_message
from webapp.llm.images import SENT_LONG_EDGE
from webapp.llm.providers.base import Message
from webapp.llm.routing import Route

HEADER_CHARS = 4 * 32 * 1024
"""Base64 read for a picture's size: 96 KiB of data, past any usual EXIF block."""
UNKNOWN = max(SENT_LONG_EDGE.values())
"""The side of a picture whose size is not known: the largest any provider reads."""


def picture_size(url: str) -> tuple[int, int]:
    """A data URL's picture size from its header; the largest square otherwise."""
    _, _, data = url.partition(";base64,")
    try:
        head = base64.b64decode(data[:HEADER_CHARS], validate=False)
        with Image.open(BytesIO(head)) as picture:
            width, height = picture.size
        return width, height
    except (binascii.Error, ValueError, OSError, UnidentifiedImageError, SyntaxError):
        return UNKNOWN, UNKNOWN


def picture_urls(message: Message) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        str((part.get("image_url") or {}).get("url", ""))
        for part in content
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]


def with_picture_estimates(
    catalog: Catalog, route: Route, messages: Sequence[Message], given: list[int] | None
) -> list[int] | None:
    """The messages' estimates with each picture counted by the route's rules (`given`,
    the estimates already made, or None when there is no picture)."""
    if not any(picture_urls(m) for m in messages):
        return given
    sizes = list(given) if given is not None else [estimate_message(m) for m in messages]
    for index, message in enumerate(messages):
        urls = picture_urls(message)
        if not urls:
            continue
        content = message.get("content") or []
        text = [p for p in content if not (isinstance(p, dict) and p.get("type") == "image_url")]
        sizes[index] = estimate_message({**message, "content": text}) + sum(
            costliest(catalog, route.models, *picture_size(url)) for url in urls
        )
    return sizes
