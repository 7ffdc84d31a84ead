"""One stacked bar for memory: caption, the bar split into coloured segments, a wrapping legend.

The planner's bars (plan view, meters: weights, KV cache, compute, output, margin against the
budget) and the measured bars (meters: this app, other programs, free, spilled) draw the same
way, so both are this widget; `BarData` turns a plan's components into its input. A marker is a
vertical line at a byte position: the budget a plan goes over, or where the plan said this
process would end (with a legend entry of its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPaintEvent, QPalette, QPen, QResizeEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from vrampilot.planner.memory.breakdown import Components
from vrampilot.planner.memory.server_host import ServerHost
from vrampilot.ui.theme import COMPONENT_COLORS, OVER_BUDGET
from vrampilot.units import format_bytes

PROCESS_COLOR = "#76b7b2"
OTHERS_COLOR = "#bab0ac"
SPILLED_COLOR = "#e15759"
SERVER_COLOR = "#ff9da7"  # llama-server's own host memory (hatched: only when it runs the plan)

_COMPONENT_LABELS = (
    ("weights", "weights"),
    ("kv", "KV cache"),
    ("compute", "compute"),
    ("output", "output"),
    ("margin", "margin"),
    ("projector", "vision projector"),
)


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
    marker_bytes: int | None = None
    marker_label: str | None = None  # a legend entry for the marker ("plan for this app"), or none
    marker_color: str | None = None  # None: the text colour
    warn: bool = False  # caption in the warning colour


@dataclass(frozen=True)
class BarData:
    """What a plan puts on one device, by component, against that device's budget."""

    title: str  # "GPU", "RAM"
    parts: Components
    budget_bytes: int
    # What llama-server adds on this device (the host: planner/memory/server_host.py), drawn hatched after
    # the engine's parts: it is there only when the plan runs in llama-server.
    server: ServerHost | None = None

    @property
    def over(self) -> bool:
        return self.parts.total_bytes > self.budget_bytes

    def caption(self) -> str:
        total = self.parts.total_bytes
        if self.budget_bytes <= 0:
            return f"{self.title}: {format_bytes(total)}"
        pct = 100 * total / self.budget_bytes
        status = f"{format_bytes(total - self.budget_bytes)} over" if self.over else f"{pct:.0f}%"
        served = f"; {format_bytes(total + self.server.total_bytes)} under llama-server" if self.server else ""
        return f"{self.title}: {format_bytes(total)} of {format_bytes(self.budget_bytes)} ({status}){served}"

    def server_segments(self) -> list[Segment]:
        s = self.server
        if s is None:
            return []
        parts = [
            (f"llama-server prompt cache (--cache-ram {s.cache_ram_mib})", s.cache_bytes),
            (f"checkpoints (--ctx-checkpoints {s.ctx_checkpoints})", s.checkpoints_bytes),
            ("llama-server process", s.process_bytes),
        ]
        return [Segment(label, n, SERVER_COLOR, hatched=True) for label, n in parts if n > 0]

    def segments(self) -> list[tuple[str, str, int]]:
        d = self.parts.as_dict()
        return [(key, label, d[key]) for key, label in _COMPONENT_LABELS if d[key] > 0]

    def usage(self) -> UsageData:
        over = self.over and self.budget_bytes > 0
        server = self.server_segments()
        return UsageData(
            caption=self.caption(),
            segments=tuple(Segment(label, n, COMPONENT_COLORS[key]) for key, label, n in self.segments())
            + tuple(server),
            scale_bytes=max(self.budget_bytes, self.parts.total_bytes + sum(x.n_bytes for x in server), 1),
            marker_bytes=self.budget_bytes if over else None,
            marker_color=OVER_BUDGET,
            warn=over,
        )


@dataclass(frozen=True)
class BarLayout:
    """Where a bar's parts go at one width, in pixels: the caption's lines, the bar, and each
    legend entry's text at its position. Painting and the height the bar asks for both come from
    it, so what is drawn always fits the height laid out (a fixed height cut the legend's last
    row and the caption ran past the right edge, issue 58)."""

    caption_lines: tuple[str, ...]
    bar_top: float
    legend: tuple[tuple[str, Segment | None, float, float], ...]  # text, segment (None: marker), x, y
    height: int


class UsageBar(QWidget):
    """Draws a UsageData: its height follows its width (the caption and legend wrap)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._usage: UsageData | None = None
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def set_usage(self, data: UsageData | None) -> None:
        self._usage = data
        rows: list[str] = []
        if data is not None:
            rows = [data.caption] + [f"{s.label}: {format_bytes(s.n_bytes)}" for s in data.segments]
            if data.marker_bytes is not None and data.marker_label:
                rows.append(f"{data.marker_label}: {format_bytes(data.marker_bytes)} (tick)")
        self.setToolTip("\n".join(rows))
        self.setAccessibleName(data.caption if data else "")
        self.updateGeometry()
        self.update()

    set_data = set_usage

    def data(self) -> UsageData | None:
        return self._usage

    def bar_layout(self, width: int) -> BarLayout:
        """The caption wrapped at its words, then the bar, then the legend's entries flowed into
        rows, an entry's label shortened only when it alone is wider than the bar (the tooltip has
        it whole)."""
        fm = self.fontMetrics()
        line = fm.height()
        w = max(width - 2, 1)
        d = self._usage
        caption_lines: list[str] = []
        for word in (d.caption if d else "").split(" "):
            if caption_lines and fm.horizontalAdvance(f"{caption_lines[-1]} {word}") <= w:
                caption_lines[-1] = f"{caption_lines[-1]} {word}"
            else:
                caption_lines.append(fm.elidedText(word, Qt.TextElideMode.ElideRight, w))
        bar_top = line * max(len(caption_lines), 1) + 3
        entries: list[tuple[str, str, Segment | None]] = []
        if d is not None:
            entries = [(s.label, format_bytes(s.n_bytes), s) for s in d.segments]
            if d.marker_bytes is not None and d.marker_label:
                entries.append((d.marker_label, format_bytes(d.marker_bytes), None))
        sw = line * 0.7
        y = bar_top + line * 1.1 + 4
        lx = 1.0
        legend: list[tuple[str, Segment | None, float, float]] = []
        for label, size, seg in entries:
            # The size always shows; a label too long for a row of its own is shortened.
            room = int(w - sw - 4 - fm.horizontalAdvance(f" {size}"))
            fitted = f"{fm.elidedText(label, Qt.TextElideMode.ElideRight, max(room, 0))} {size}"
            tw = fm.horizontalAdvance(fitted)
            if lx + sw + 4 + tw > w and lx > 1:
                lx = 1.0
                y += line + 2
            legend.append((fitted, seg, lx, y))
            lx += sw + 4 + tw + line * 0.8
        bottom = y + line if legend else bar_top + line * 1.1
        return BarLayout(tuple(caption_lines), bar_top, tuple(legend), int(bottom + 4))

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self.bar_layout(width).height

    def sizeHint(self) -> QSize:
        return QSize(300, self.heightForWidth(self.width() if self.width() > 1 else 300))

    def minimumSizeHint(self) -> QSize:
        return QSize(160, self.heightForWidth(self.width() if self.width() > 1 else 160))

    def resizeEvent(self, event: QResizeEvent) -> None:
        # A new width may need another height (more or fewer legend rows): ask the layout for it.
        if self.heightForWidth(event.size().width()) != event.size().height():
            self.updateGeometry()
        super().resizeEvent(event)

    def paintEvent(self, _event: QPaintEvent) -> None:
        d = self._usage
        if d is None:
            return
        lay = self.bar_layout(self.width())
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        fm = self.fontMetrics()
        line = fm.height()
        w = self.width() - 2
        text_color = pal.color(QPalette.ColorRole.WindowText)
        p.setPen(QColor(SPILLED_COLOR if d.marker_color is None else d.marker_color) if d.warn else text_color)
        for i, text in enumerate(lay.caption_lines):
            p.drawText(QRectF(1, i * line, w, line), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
        bar = QRectF(1, lay.bar_top, w, line * 1.1)
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
                rect = QRectF(x, bar.top() + 1, max(seg_w, 1.0), bar.height() - 2)
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(QBrush(QColor(s.color)))
                p.drawRect(rect)
                if s.hatched:
                    p.setBrush(QBrush(text_color, Qt.BrushStyle.BDiagPattern))
                    p.drawRect(rect)
            x += seg_w
        marker_pen = QPen(QColor(d.marker_color) if d.marker_color else text_color, 2)
        if d.marker_bytes is not None and d.marker_bytes > 0:
            mx = bar.left() + bar.width() * min(d.marker_bytes, scale) / scale
            p.setPen(marker_pen)
            p.drawLine(int(mx), int(bar.top() - 3), int(mx), int(bar.bottom() + 3))
        sw = line * 0.7
        for text, seg, lx, y in lay.legend:
            if seg is None:
                p.setPen(marker_pen)
                p.drawLine(int(lx + sw / 2), int(y + 1), int(lx + sw / 2), int(y + line - 1))
            else:
                p.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1) if seg.color is None else Qt.PenStyle.NoPen)
                p.setBrush(QColor(seg.color) if seg.color else pal.color(QPalette.ColorRole.Base))
                p.drawRect(QRectF(lx, y + (line - sw) / 2, sw, sw))
            p.setPen(text_color)
            p.drawText(
                QRectF(lx + sw + 4, y, fm.horizontalAdvance(text) + 2, line), Qt.AlignmentFlag.AlignVCenter, text
            )
        p.end()


class MemoryBar(UsageBar):
    """A plan's components on one device (BarData in, drawn as a UsageBar)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._bar: BarData | None = None

    def set_data(self, data: BarData | None) -> None:  # type: ignore[override]  # a MemoryBar takes BarData (segments), not UsageBar's UsageData
        self._bar = data
        self.set_usage(data.usage() if data is not None else None)

    def data(self) -> BarData | None:  # type: ignore[override]  # BarData, as set_data took it
        return self._bar
