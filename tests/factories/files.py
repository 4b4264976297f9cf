"""Files the tests attach, made in the test: small pictures (one with a GPS position in
its EXIF), a PNG whose header claims billions of pixels, PDFs with a line of text a page."""

from __future__ import annotations

import struct
import zlib
from io import BytesIO

from PIL import Image

GPS_IFD = 0x8825


def picture(size: tuple[int, int] = (64, 48), kind: str = "PNG", gps: bool = False) -> bytes:
    """A gradient picture; with `gps`, its EXIF names where it was taken."""
    image = Image.linear_gradient("L").resize(size).convert("RGB")
    out = BytesIO()
    if gps:
        exif = Image.Exif()
        exif[0x010F] = "Camera maker"
        exif.get_ifd(GPS_IFD).update({1: "N", 2: (59.0, 54.0, 0.0), 3: "E", 4: (10.0, 45.0, 0.0)})
        image.save(out, format=kind, exif=exif)
    else:
        image.save(out, format=kind)
    return out.getvalue()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG of a few bytes whose header says `width` x `height`: a decompression bomb's
    shape (its pixels are never there to unpack)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" * 64)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def pdf(pages: list[str]) -> bytes:
    """A PDF with one line of text on each page (Helvetica, ASCII text)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    font = 3
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for text in pages:
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (content, font)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
