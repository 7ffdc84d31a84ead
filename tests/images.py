"""Small images the vision tests send: written with zlib, no imaging library needed."""

from __future__ import annotations

import struct
import zlib


def png_bytes(width: int, height: int) -> bytes:
    """An RGB PNG of a gradient."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(
        b"\x00"
        + b"".join(bytes((x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), 96)) for x in range(width))
        for y in range(height)
    )
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
