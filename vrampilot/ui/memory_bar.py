"""A memory bar per device: what the plan puts there, split by component, against the budget."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from vrampilot.planner.memory import Components
from vrampilot.ui.theme import COMPONENT_COLORS, OVER_BUDGET
from vrampilot.units import format_bytes

_LABELS = (
    ("weights", "weights"),
    ("kv", "KV cache"),
    ("compute", "compute"),
    ("output", "output"),
    ("margin", "margin"),
)


@dataclass(frozen=True)
class BarData:
    title: str  # "GPU", "RAM"
    parts: Components
    budget_bytes: int

    @property
    def over(self) -> bool:
        return self.parts.total_bytes > self.budget_bytes

    def caption(self) -> str:
        total = self.parts.total_bytes
        if self.budget_bytes <= 0:
            return f"{self.title}: {format_bytes(total)}"
        pct = 100 * total / self.budget_bytes
        status = f"{format_bytes(total - self.budget_bytes)} over" if self.over else f"{pct:.0f}%"
        return f"{self.title}: {format_bytes(total)} of {format_bytes(self.budget_bytes)} ({status})"

    def segments(self) -> list[tuple[str, str, int]]:
        d = self.parts.as_dict()
        return [(key, label, d[key]) for key, label in _LABELS if d[key] > 0]


class MemoryBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._data: BarData | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_data(self, data: BarData | None) -> None:
        self._data = data
        self.setToolTip(self._tooltip())
        self.setAccessibleName(data.caption() if data else "")
        self.updateGeometry()
        self.update()

    def data(self) -> BarData | None:
        return self._data

    def _tooltip(self) -> str:
        if self._data is None:
            return ""
        rows = [self._data.caption()] + [f"{label}: {format_bytes(n)}" for _k, label, n in self._data.segments()]
        return "\n".join(rows)

    def sizeHint(self) -> QSize:
        fm = self.fontMetrics()
        line = fm.height()
        return QSize(300, int(line * 4.7 + 8))

    def minimumSizeHint(self) -> QSize:
        return QSize(160, self.sizeHint().height())

    def paintEvent(self, _event: QPaintEvent) -> None:
        if self._data is None:
            return
        d = self._data
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        fm = self.fontMetrics()
        line = fm.height()
        w = self.width() - 2
        # Caption
        p.setPen(pal.color(QPalette.ColorRole.WindowText))
        caption_color = QColor(OVER_BUDGET) if d.over else pal.color(QPalette.ColorRole.WindowText)
        p.setPen(caption_color)
        p.drawText(QRectF(1, 0, w, line), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, d.caption())
        # Bar
        bar = QRectF(1, line + 3, w, line * 1.1)
        p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
        p.setBrush(pal.color(QPalette.ColorRole.Base))
        p.drawRoundedRect(bar, 3, 3)
        scale_bytes = max(d.budget_bytes, d.parts.total_bytes, 1)
        x = bar.left()
        p.setPen(Qt.PenStyle.NoPen)
        for key, _label, n in d.segments():
            seg_w = bar.width() * n / scale_bytes
            if seg_w <= 0:
                continue
            p.setBrush(QBrush(QColor(COMPONENT_COLORS[key])))
            p.drawRect(QRectF(x, bar.top() + 1, max(seg_w, 1.0), bar.height() - 2))
            x += seg_w
        if d.budget_bytes > 0 and d.over:
            bx = bar.left() + bar.width() * d.budget_bytes / scale_bytes
            p.setPen(QPen(QColor(OVER_BUDGET), 2))
            p.drawLine(int(bx), int(bar.top() - 2), int(bx), int(bar.bottom() + 2))
        # Legend
        y = bar.bottom() + 4
        lx = 1.0
        sw = line * 0.7
        for key, label, n in d.segments():
            text = f"{label} {format_bytes(n)}"
            tw = fm.horizontalAdvance(text)
            if lx + sw + 4 + tw > w and lx > 1:
                lx = 1.0
                y += line + 2
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(COMPONENT_COLORS[key]))
            p.drawRect(QRectF(lx, y + (line - sw) / 2, sw, sw))
            p.setPen(pal.color(QPalette.ColorRole.WindowText))
            p.drawText(QRectF(lx + sw + 4, y, tw + 2, line), Qt.AlignmentFlag.AlignVCenter, text)
            lx += sw + 4 + tw + line * 0.8
        p.end()
