"""Pictures in a gateway call, made ready and bounded as the chat's are (docs/design.md
section 12): each OpenAI `image_url` part given as a data URL is read in a reader process
(`files.isolation`, never on the event loop), its type told by its bytes, decoded within
the pixel cap, stripped of its metadata (EXIF, GPS) and scaled to what the first model's
provider reads at most, by the same function the chat's stored pictures go through
(`files.inspect.offered_picture`); it is then counted at the size sent, by the
costliest rule among the route's models. A picture given by its web address is passed
on as it came and counted as the largest any provider reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webapp.chat.files.inspect import offered_picture
from webapp.chat.files.isolation import in_child
from webapp.chat.sending.files import costliest
from webapp.errors import InvalidInput
from webapp.gateway.errors import GatewayError
from webapp.llm.catalog import Catalog
from webapp.llm.estimator import estimate_message
from webapp.llm.images import SENT_LONG_EDGE
from webapp.llm.providers.base import Message
from webapp.llm.routing import Route

UNKNOWN = max(SENT_LONG_EDGE.values())
"""The side of a picture whose size is not known: the largest any provider reads."""
DATA_URL = "data:"

Sizes = dict[str, tuple[int, int]]
"""A sent picture's size by its URL."""


def picture_urls(message: Message) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        str((part.get("image_url") or {}).get("url", ""))
        for part in content
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]


async def ready_pictures(
    catalog: Catalog,
    route: Route,
    messages: Sequence[Message],
    seconds: float,
    max_pixels: int,
) -> tuple[list[Message], Sizes]:
    """The messages with every data-URL picture as it is sent, and the sent sizes; an
    OpenAI-shaped 400 naming the part for a picture that cannot be read (a type that
    lies, a decompression bomb, SVG or HTML) or takes longer than `seconds`."""
    provider = catalog.providers.get(route.primary.provider)
    long_edge = SENT_LONG_EDGE.get(provider.kind if provider else "openai", 2048)
    sizes: Sizes = {}
    ready: list[Message] = []
    for number, message in enumerate(messages):
        content = message.get("content")
        if not any(url.startswith(DATA_URL) for url in picture_urls(message)):
            ready.append(message)
            continue
        assert isinstance(content, list)
        parts: list[Any] = []
        for index, part in enumerate(content):
            url = str((part.get("image_url") or {}).get("url", "")) if _is_image(part) else ""
            if not url.startswith(DATA_URL):
                parts.append(part)
                continue
            where = f"messages[{number}].content[{index}]"
            try:
                sent, width, height = await in_child(
                    f"the picture in {where}",
                    seconds,
                    offered_picture,
                    where,
                    url,
                    long_edge,
                    max_pixels,
                )
            except InvalidInput as refused:
                raise GatewayError(
                    400, refused.message, param=where, code="invalid_image"
                ) from None
            sizes[sent] = (width, height)
            parts.append({**part, "image_url": {**part["image_url"], "url": sent}})
        ready.append({**message, "content": parts})
    return ready, sizes


def _is_image(part: object) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def with_picture_estimates(
    catalog: Catalog,
    route: Route,
    messages: Sequence[Message],
    given: list[int] | None,
    sizes: Sizes | None = None,
) -> list[int] | None:
    """The messages' estimates with each picture counted by the route's rules at the size
    it is sent (`sizes`, from `ready_pictures`; a picture not there at the largest size);
    `given`, the estimates already made, or None when there is no picture."""
    if not any(picture_urls(m) for m in messages):
        return given
    known = sizes or {}
    estimates = list(given) if given is not None else [estimate_message(m) for m in messages]
    for index, message in enumerate(messages):
        urls = picture_urls(message)
        if not urls:
            continue
        content = message.get("content") or []
        text = [p for p in content if not _is_image(p)]
        estimates[index] = estimate_message({**message, "content": text}) + sum(
            costliest(catalog, route.models, *known.get(url, (UNKNOWN, UNKNOWN))) for url in urls
        )
    return estimates
