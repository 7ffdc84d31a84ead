"""Render vrampilot.svg into the PNG sizes the Linux desktop wants and a multi-size Windows .ico.

Run after editing the SVG (the outputs are committed, so a build needs no SVG renderer):
    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/icons/make_icons.py
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

HERE = Path(__file__).resolve().parent
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)


def render(renderer: QSvgRenderer, size: int) -> bytes:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return bytes(data.data())


def ico(pngs: dict[int, bytes]) -> bytes:
    """ICO with PNG-compressed entries (Windows Vista and later read them)."""
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = 6 + 16 * len(pngs)
    entries, blobs = b"", b""
    for size, png in sorted(pngs.items()):
        dim = 0 if size >= 256 else size  # 0 means 256 in an ICO directory entry
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset + len(blobs))
        blobs += png
    return header + entries + blobs


def main() -> int:
    _app = QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(HERE / "vrampilot.svg"))
    if not renderer.isValid():
        raise SystemExit("vrampilot.svg does not parse")
    pngs = {size: render(renderer, size) for size in PNG_SIZES}
    for size, png in pngs.items():
        (HERE / f"vrampilot-{size}.png").write_bytes(png)
    (HERE / "vrampilot.ico").write_bytes(ico({s: pngs[s] for s in ICO_SIZES}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
