"""Measured-memory bars for the meters, drawn like the planner's MemoryBar (caption, bar, legend).

The plan's row reuses vrampilot.ui.memory_bar.MemoryBar; this draws the measured row under it on the
same scale (the card's total), so the two bars line up: planned components above, this process,
other programs and free below, and a tick where the plan said this process would end.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from vrampilot.units import format_bytes

PROCESS_COLOR = "#76b7b2"
OTHERS_COLOR = "#bab0ac"
SPILLED_COLOR = "#e15759"


@dataclass(frozen=True)
class Segment:
    label: str
    n_bytes: int
    color: str | None  # None: drawn empty (free memory)
    hatched: bool = False


@dataclass(frozen=True)
class UsageData:
    caption: str
    segments: tuple[Segment, ...]
    scale_bytes: int
    marker_bytes: int | None = None  # the plan's prediction for this process
    warn: bool = False  # caption in the warning colour


class UsageBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._data: UsageData | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_data(self, data: UsageData | None) -> None:
        self._data = data
        if data is not None:
            rows = [data.caption] + [f"{s.label}: {format_bytes(s.n_bytes)}" for s in data.segments]
            if data.marker_bytes is not None:
                rows.append(f"plan for this process: {format_bytes(data.marker_bytes)} (tick)")
            self.setToolTip("\n".join(rows))
            self.setAccessibleName(data.caption)
        self.update()

    def data(self) -> UsageData | None:
        return self._data

    def sizeHint(self) -> QSize:
        # Same height as MemoryBar: caption, bar, two legend lines.
        return QSize(300, int(self.fontMetrics().height() * 4.7 + 8))

    def minimumSizeHint(self) -> QSize:
        return QSize(160, self.sizeHint().height())

    def paintEvent(self, _event: QPaintEvent) -> None:
        d = self._data
        if d is None:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        fm = self.fontMetrics()
        line = fm.height()
        w = self.width() - 2
        text_color = pal.color(QPalette.ColorRole.WindowText)
        p.setPen(QColor(SPILLED_COLOR) if d.warn else text_color)
        p.drawText(QRectF(1, 0, w, line), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, d.caption)
        bar = QRectF(1, line + 3, w, line * 1.1)
        p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
        p.setBrush(pal.color(QPalette.ColorRole.Base))
        p.drawRoundedRect(bar, 3, 3)
        scale = max(d.scale_bytes, sum(s.n_bytes for s in d.segments), 1)
        x = bar.left()
        for s in d.segments:
            seg_w = bar.width() * s.n_bytes / scale
            if seg_w <= 0:
                continue
            if s.color is not None:
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(QBrush(QColor(s.color)))
                p.drawRect(QRectF(x, bar.top() + 1, max(seg_w, 1.0), bar.height() - 2))
                if s.hatched:
                    p.setBrush(QBrush(text_color, Qt.BrushStyle.BDiagPattern))
                    p.drawRect(QRectF(x, bar.top() + 1, max(seg_w, 1.0), bar.height() - 2))
            x += seg_w
        if d.marker_bytes is not None and d.marker_bytes > 0:
            mx = bar.left() + bar.width() * min(d.marker_bytes, scale) / scale
            p.setPen(QPen(text_color, 2))
            p.drawLine(int(mx), int(bar.top() - 3), int(mx), int(bar.bottom() + 3))
        # Legend, wrapping like MemoryBar's; the tick gets an entry of its own.
        entries: list[tuple[str, Segment | None]] = [(f"{x.label} {format_bytes(x.n_bytes)}", x) for x in d.segments]
        if d.marker_bytes is not None:
            entries.append((f"plan for this app {format_bytes(d.marker_bytes)}", None))
        y = bar.bottom() + 4
        lx = 1.0
        sw = line * 0.7
        for text, seg in entries:
            tw = fm.horizontalAdvance(text)
            if lx + sw + 4 + tw > w and lx > 1:
                lx = 1.0
                y += line + 2
            if seg is None:
                p.setPen(QPen(text_color, 2))
                p.drawLine(int(lx + sw / 2), int(y + 1), int(lx + sw / 2), int(y + line - 1))
            else:
                p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
                p.setBrush(QColor(seg.color) if seg.color else pal.color(QPalette.ColorRole.Base))
                p.drawRect(QRectF(lx, y + (line - sw) / 2, sw, sw))
            p.setPen(text_color)
            p.drawText(QRectF(lx + sw + 4, y, tw + 2, line), Qt.AlignmentFlag.AlignVCenter, text)
            lx += sw + 4 + tw + line * 0.8
        p.end()
