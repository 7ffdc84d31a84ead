"""A rolling line plot of the last minutes, painted with QPainter.

Why not pyqtgraph: with PySide6 6.12.0 on Python 3.11 every `Signal.emit()` made from Python drops
a reference to `True` (see the meters report), and pyqtgraph emits twice per `setData`; at the
meters' refresh rate that exhausts the count within a minute and the interpreter aborts. A plot
that only paints emits nothing. It is one widget, not a framework: series of (seconds, value)
drawn against a fixed time window, three horizontal grid lines, and a one-line legend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget


@dataclass(frozen=True)
class Series:
    label: str
    color: str
    xs: tuple[float, ...]  # seconds relative to now (<= 0)
    ys: tuple[float | None, ...]  # None breaks the line: a reading that was not available
    points: bool = False  # one marker per value (per-reply measurements) instead of a line


def nice_ceiling(value: float) -> float:
    """The next 1-2-5 step at or above `value`, so axis labels read 2, 5, 10, 20..."""
    if value <= 0:
        return 1.0
    exp: float = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


class RollingPlot(QWidget):
    def __init__(self, unit: str, window_s: float, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.unit = unit
        self.window_s = window_s
        self._series: dict[str, Series] = {}
        self._fixed_max: float | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(300, self.fontMetrics().height() * 7)

    def minimumSizeHint(self) -> QSize:
        return QSize(160, self.sizeHint().height())

    def set_fixed_max(self, value: float | None) -> None:
        """A fixed top (100 for percentages); None scales to the data."""
        self._fixed_max = value

    def set_series(
        self,
        key: str,
        label: str,
        color: str,
        xs: Sequence[float],
        ys: Sequence[float | None],
        *,
        points: bool = False,
    ) -> None:
        self._series[key] = Series(label, color, tuple(xs), tuple(ys), points)
        self.update()

    def series(self, key: str) -> Series | None:
        return self._series.get(key)

    def y_max(self) -> float:
        if self._fixed_max is not None:
            return self._fixed_max
        values = [
            y
            for s in self._series.values()
            for x, y in zip(s.xs, s.ys, strict=False)
            if y is not None and x >= -self.window_s
        ]
        return nice_ceiling(max(values, default=0.0) * 1.1)

    def _window_text(self) -> str:
        minutes = self.window_s / 60
        return f"-{minutes:.0f} min" if minutes >= 1 else f"-{self.window_s:.0f} s"

    def paintEvent(self, _event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        fm = self.fontMetrics()
        line = fm.height()
        text = pal.color(QPalette.ColorRole.WindowText)
        muted = pal.color(QPalette.ColorRole.PlaceholderText)
        top = self.y_max()
        labels = [f"{top * f:g}" for f in (1.0, 0.5, 0.0)]
        left = max(fm.horizontalAdvance(t) for t in labels) + 6
        legend_h = line + 2
        plot = QRectF(left, legend_h + line * 0.3, self.width() - left - 2, self.height() - legend_h - line * 1.6)
        p.fillRect(plot, pal.color(QPalette.ColorRole.Base))
        # Grid and y labels.
        p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1, Qt.PenStyle.DotLine))
        for frac, label in zip((0.0, 0.5, 1.0), labels, strict=True):
            y = plot.top() + plot.height() * frac
            p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            p.save()
            p.setPen(muted)
            p.drawText(
                QRectF(0, y - line / 2, left - 4, line),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                label,
            )
            p.restore()
        p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRect(plot)
        # Time axis: the window's start, the unit, now.
        p.setPen(muted)
        bottom = QRectF(plot.left(), plot.bottom() + 1, plot.width(), line)
        p.drawText(bottom, Qt.AlignmentFlag.AlignLeft, self._window_text())
        p.drawText(bottom, Qt.AlignmentFlag.AlignHCenter, self.unit)
        p.drawText(bottom, Qt.AlignmentFlag.AlignRight, "now")

        def to_point(x: float, y: float) -> QPointF:
            fx = 1.0 + max(-self.window_s, min(0.0, x)) / self.window_s
            fy = min(max(y / top, 0.0), 1.05)
            return QPointF(plot.left() + fx * plot.width(), plot.bottom() - fy * plot.height())

        p.save()
        # Room for half a marker beyond the edges: the latest reply sits exactly at "now".
        p.setClipRect(plot.adjusted(0, -line * 0.3, line * 0.3, 0))
        for s in self._series.values():
            color = QColor(s.color)
            visible = [(x, y) for x, y in zip(s.xs, s.ys, strict=False) if x >= -self.window_s]
            if s.points:
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(color)
                radius = max(2.5, line * 0.2)
                for px, py in visible:
                    if py is not None:
                        p.drawEllipse(to_point(px, py), radius, radius)
                continue
            path = QPainterPath()
            pen_down = False
            for px, py in visible:
                if py is None:
                    pen_down = False
                    continue
                if pen_down:
                    path.lineTo(to_point(px, py))
                else:
                    path.moveTo(to_point(px, py))
                    pen_down = True
            p.setPen(QPen(color, 2))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawPath(path)
        p.restore()
        # Legend on one line above the plot; what does not fit is left out, the label says it all.
        x = plot.left()
        sw = line * 0.7
        for s in self._series.values():
            tw = fm.horizontalAdvance(s.label)
            if x + sw + 4 + tw > self.width() and x > plot.left():
                break
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(s.color))
            if s.points:
                p.drawEllipse(QRectF(x, (legend_h - sw) / 2, sw, sw))
            else:
                p.drawRect(QRectF(x, legend_h / 2 - 1.5, sw, 3))
            p.setPen(text)
            p.drawText(QRectF(x + sw + 4, 0, tw + 2, legend_h), Qt.AlignmentFlag.AlignVCenter, s.label)
            x += sw + 4 + tw + line * 0.8
        p.end()
