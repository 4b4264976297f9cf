"""The heavy part of taking a file, run in a child process (`isolation`): an image decoded
within a pixel cap, its first frame kept, turned upright and written again without its
metadata (EXIF, GPS, comments); a PDF's text extracted within a page and a size cap; a
text file decoded. Whatever a crafted file makes the decoders do happens there, where a
time limit can stop it and the event loop never waits for it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import warnings
from dataclasses import dataclass
from io import BytesIO

from PIL import Image, ImageOps
from pypdf import PdfReader

from webapp.chat.files.sniff import Sniffed, sniff
from webapp.chat.stored.attachments import decode_text
from webapp.errors import InvalidInput

DECODERS = ["PNG", "JPEG", "WEBP", "GIF"]
"""The only decoders Pillow may try: the sniffed types, never a format found by guessing."""
SAVED_AS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP", "image/gif": "PNG"}
"""A GIF's first frame is kept as a PNG: the providers read no animation."""


@dataclass(frozen=True, slots=True)
class FileLimits:
    max_pixels: int
    max_pdf_pages: int
    max_text_chars: int


@dataclass(frozen=True, slots=True)
class Inspected:
    data: bytes
    """The bytes to keep: the upload's own, or an image written again without metadata."""
    media_type: str
    sha256: str
    text: str | None = None
    width: int | None = None
    height: int | None = None


def inspect(name: str, data: bytes, sniffed: Sniffed, limits: FileLimits) -> Inspected:
    """The file as it is kept, or InvalidInput naming it."""
    if sniffed.kind == "image":
        return _image(name, data, sniffed.media_type, limits.max_pixels)
    read = _pdf_text if sniffed.kind == "document" else _plain_text
    text = clean_text(read(name, data, limits))
    if not text.strip():
        raise InvalidInput(f"{name} holds no text to read")
    if len(text) > limits.max_text_chars:
        raise InvalidInput(
            f"{name} is {len(text):,} characters of text; a file may hold {limits.max_text_chars:,}"
        )
    return Inspected(data, sniffed.media_type, _digest(data), text=text)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _plain_text(name: str, data: bytes, _limits: FileLimits) -> str:
    return decode_text(name, data)


def clean_text(text: str) -> str:
    """Text a database and a tokenizer can hold: no NUL, no lone surrogate (a PDF's text
    layer may hold either), Windows line ends made plain."""
    text = text.replace("\x00", "").replace("\r\n", "\n")
    return text.encode("utf-8", "replace").decode("utf-8")


def _image(name: str, data: bytes, media_type: str, max_pixels: int) -> Inspected:
    Image.MAX_IMAGE_PIXELS = max_pixels
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(BytesIO(data), formats=DECODERS) as picture:
                width, height = picture.size
                if width * height > max_pixels:
                    raise InvalidInput(_too_many_pixels(name, width, height, max_pixels))
                picture.seek(0)
                if not _carries_more_than_pixels(picture, media_type):
                    return Inspected(data, media_type, _digest(data), width=width, height=height)
                upright = ImageOps.exif_transpose(picture)
                return _rewritten(upright, media_type)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise InvalidInput(f"{name} unpacks to more than {max_pixels:,} pixels") from None
        except (OSError, SyntaxError, ValueError, EOFError):
            raise InvalidInput(f"{name} is not a picture that can be read") from None


PLAIN_INFO = frozenset(
    {"dpi", "jfif", "jfif_version", "jfif_unit", "jfif_density", "progressive", "progression"}
    | {"icc_profile", "gamma", "transparency", "aspect", "srgb", "lossless", "adobe"}
    | {"adobe_transform", "background", "loop", "duration", "version", "compression"}
)
"""What a picture file may hold besides its pixels and still be kept as it came: how to
draw it (resolution, colour profile, transparency), nothing of where or by whom."""


def _carries_more_than_pixels(picture: Image.Image, media_type: str) -> bool:
    """Whether the file must be written again: a GIF (its first frame is kept), or one
    with EXIF (a position, a camera, an orientation to apply) or any text or metadata
    chunk. A picture already clean is kept byte for byte (so an export's pictures come
    back as they went)."""
    if media_type == "image/gif" or picture.getexif():
        return True
    return bool(set(picture.info) - PLAIN_INFO)


def _too_many_pixels(name: str, width: int, height: int, max_pixels: int) -> str:
    return (
        f"{name} is {width:,} x {height:,} pixels; a picture may have {max_pixels:,} pixels at most"
    )


def _rewritten(picture: Image.Image, media_type: str) -> Inspected:
    """The picture written again from its pixels alone: nothing of the file's metadata
    goes along (no `exif` or text chunks are handed to the encoder)."""
    saved_as = SAVED_AS[media_type]
    if saved_as == "JPEG" and picture.mode not in ("RGB", "L"):
        picture = picture.convert("RGB")
    elif saved_as != "JPEG" and picture.mode not in ("RGB", "RGBA", "L", "LA"):
        picture = picture.convert("RGBA")
    out = BytesIO()
    options: dict[str, object] = {"quality": 92} if saved_as in ("JPEG", "WEBP") else {}
    picture.save(out, format=saved_as, **options)
    kept = "image/png" if saved_as == "PNG" else media_type
    data = out.getvalue()
    return Inspected(data, kept, _digest(data), width=picture.width, height=picture.height)


def _pdf_text(name: str, data: bytes, limits: FileLimits) -> str:
    try:
        reader = PdfReader(BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise InvalidInput(f"{name} is locked with a password")
        if len(reader.pages) > limits.max_pdf_pages:
            raise InvalidInput(
                f"{name} has {len(reader.pages):,} pages; a PDF may have {limits.max_pdf_pages:,}"
            )
        pages: list[str] = []
        held = 0
        for page in reader.pages:
            pages.append(page.extract_text() or "")
            held += len(pages[-1])
            if held > limits.max_text_chars:
                raise InvalidInput(
                    f"{name} holds more than {limits.max_text_chars:,} characters of text"
                )
    except InvalidInput:
        raise
    except Exception:  # a broken PDF breaks the reader in many ways
        raise InvalidInput(f"{name} is not a PDF that can be read") from None
    return "\n\n".join(page.strip() for page in pages)


def as_sent(data: bytes, media_type: str, long_edge: int) -> str:
    """A stored picture as a data URL, its long edge at most `long_edge` (what the
    provider reads at most: more would be bytes for nothing)."""
    return sent_picture(data, media_type, long_edge)[0]


def sent_picture(data: bytes, media_type: str, long_edge: int) -> tuple[str, int, int]:
    """A picture already kept (its metadata gone, within the pixel cap) as it is sent: a
    data URL, its long edge at most `long_edge`, and its size as sent. The one rule for
    every picture that leaves the app, the chat's stored ones and the gateway's alike."""
    Image.MAX_IMAGE_PIXELS = None  # a kept picture passed the cap when it was taken
    with Image.open(BytesIO(data), formats=DECODERS) as picture:
        width, height = picture.size
        if max(picture.size) > long_edge:
            picture.thumbnail((long_edge, long_edge))
            width, height = picture.size
            out = BytesIO()
            options = {"quality": 92} if media_type in ("image/jpeg", "image/webp") else {}
            picture.save(out, format=SAVED_AS[media_type], **options)
            data = out.getvalue()
    url = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    return url, width, height


def offered_picture(name: str, url: str, long_edge: int, max_pixels: int) -> tuple[str, int, int]:
    """A picture a caller gave as a data URL (the gateway's `image_url` parts) made ready
    as the chat's are: its type told by its bytes, decoded within the pixel cap, turned
    upright and stripped of its metadata (`_image`), then scaled (`sent_picture`)."""
    header, _, encoded = url.partition(",")
    if not (header.startswith("data:") and header.endswith(";base64")):
        raise InvalidInput(f"{name} is not a base64 data URL")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{name} is not valid base64") from None
    sniffed = sniff(name, data, "image/")
    if sniffed.kind != "image":
        raise InvalidInput(f"{name} is not a PNG, JPEG, WebP or GIF picture")
    kept = _image(name, data, sniffed.media_type, max_pixels)
    return sent_picture(kept.data, kept.media_type, long_edge)
