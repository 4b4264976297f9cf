"""What a file is, from its first bytes: never from its name or the type its sender
declared, which say only what the sender claims. An image is PNG, JPEG, WebP or GIF; a
document is a PDF; anything else must be UTF-8 text. SVG and HTML are text that a
browser would run: offered as a picture they are refused, never shown inline."""

from __future__ import annotations

import re
from dataclasses import dataclass

from webapp.errors import InvalidInput

IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
PDF_SIGNATURE = b"%PDF-"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".svg", ".svgz", ".bmp", ".ico")
TEXT_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv"}
TEXT_TYPES |= {".json": "application/json"}
"""A text file's type by its name's ending: only a label for the model and the page (the
bytes were already found to be text); the file is served as plain text whatever it says."""
_MARKUP = re.compile(
    rb"\A(?:\xef\xbb\xbf)?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(svg|!doctype html|html)\b",
    re.I | re.S,
)


@dataclass(frozen=True, slots=True)
class Sniffed:
    kind: str
    """`image`, `document` or `text`."""
    media_type: str


def sniff(name: str, data: bytes, declared: str = "") -> Sniffed:
    """The file's kind and type from its bytes, or InvalidInput naming the file."""
    for signature, media_type in IMAGE_SIGNATURES:
        if data.startswith(signature):
            return Sniffed("image", media_type)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return Sniffed("image", "image/webp")
    if data.startswith(PDF_SIGNATURE):
        return Sniffed("document", "application/pdf")
    lowered = name.lower()
    offered_as_image = declared.lower().startswith("image/") or lowered.endswith(IMAGE_EXTENSIONS)
    if offered_as_image:
        if _MARKUP.match(data[:4096]):
            raise InvalidInput(
                f"{name} is SVG or HTML, which is refused as a picture: attach a PNG, "
                "JPEG, WebP or GIF"
            )
        raise InvalidInput(f"{name} is not a PNG, JPEG, WebP or GIF picture")
    if b"\x00" in data:
        raise InvalidInput(
            f"{name} is not a file this app reads: attach a picture (PNG, JPEG, WebP, GIF), "
            "a PDF or a UTF-8 text file"
        )
    suffix = lowered[lowered.rfind(".") :] if "." in lowered else ""
    return Sniffed("text", TEXT_TYPES.get(suffix, "text/plain"))
