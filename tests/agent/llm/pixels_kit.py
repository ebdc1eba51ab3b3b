"""Real image files with many pixels and few bytes, made without holding the pixels.

``bilevel_png`` writes a valid 1-bit PNG row by row through zlib, so a 9000x9000 file
(81 megapixels, about 20 kB) costs the test no more memory than one row; Pillow reads
it like any PNG. ``gray_jpeg`` is a plain Pillow JPEG (one byte per pixel to make).
"""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body)
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def bilevel_png(width: int, height: int) -> bytes:
    """A black ``width`` x ``height`` 1-bit greyscale PNG."""
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1 bit, greyscale
    row = bytes(1 + (width + 7) // 8)  # filter byte "none", then the packed pixels
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", idat)
        + _chunk(b"IEND", b"")
    )


def gray_jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height), 128).save(out, format="JPEG", quality=80)
    return out.getvalue()


def size_of(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        return image.size
