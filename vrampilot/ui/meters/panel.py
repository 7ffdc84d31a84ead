"""The meter panel beside the chat, and its compact form for the status bar.

Both render a MeterReadout from the shared MetersFeed and compute nothing themselves: every number
comes from vrampilot.meters (tests check them there and here). Plots are QPainter RollingPlots (see
plot.py for why not pyqtgraph); the bars are the planner's MemoryBar above a measured
UsageBar on the same scale. Without NVML the GPU groups hide and a line says why, while RAM, CPU
and (for a plan) bandwidth keep working. Methods are named show_*, not render: QWidget.render
paints a widget into a device, and shadowing it would break grab-like callers.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QMouseEvent, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from vrampilot.engine import GenerationStats
from vrampilot.meters.bandwidth import BandwidthReading
from vrampilot.meters.kvcache import KvCacheUsage
from vrampilot.meters.sampler import Sampler
from vrampilot.meters.spill import SpillAssessment, SpillSummary
from vrampilot.meters.state import MeterReadout, RamView, VramView
from vrampilot.meters.types import MeterSample
from vrampilot.planner.memory.breakdown import Components
from vrampilot.planner.plan import Plan
from vrampilot.ui.meters.feed import MetersFeed
from vrampilot.ui.meters.plot import RollingPlot
from vrampilot.ui.stacked_bar import (
    OTHERS_COLOR,
    PROCESS_COLOR,
    SPILLED_COLOR,
    BarData,
    MemoryBar,
    Segment,
    UsageBar,
    UsageData,
)
from vrampilot.ui.theme import COMPONENT_COLORS, OVER_BUDGET, WARN_AMBER
from vrampilot.units import GIB, format_bytes

SERIES_COLORS = {
    "vram": COMPONENT_COLORS["weights"],
    "process": PROCESS_COLOR,
    "ram": COMPONENT_COLORS["kv"],
    "device": COMPONENT_COLORS["weights"],
    "host": COMPONENT_COLORS["kv"],
    "controller": COMPONENT_COLORS["margin"],
    "rx": COMPONENT_COLORS["compute"],
    "tx": COMPONENT_COLORS["output"],
    "cpu": COMPONENT_COLORS["compute"],
}


def _gpu0(history: list[MeterSample], field: str, divisor: float) -> list[float | None]:
    """One GpuSample field of the first GPU over the history, scaled; None where not read."""
    out: list[float | None] = []
    for s in history:
        value = getattr(s.gpus[0], field) if s.gpus else None
        out.append(value / divisor if value is not None else None)
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _small(widget: QWidget, factor: float = 0.9) -> None:
    # Relative to the system font, never pixels: text follows the user's font size.
    font = QFont(widget.font())
    font.setPointSizeF(max(6.0, font.pointSizeF() * factor))
    widget.setFont(font)


_PEAK_SOURCES = {"nvml": "NVML bus width x clock", "profile": "the GPU profile", "plan": "the plan's GPU"}


def _label(text: str = "", *, small: bool = False, selectable: bool = True) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    if selectable:
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if small:
        _small(label)
    return label


class _GpuBars(QWidget):
    """Plan over measured for one GPU."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.plan_bar = MemoryBar(self)
        self.measured_bar = UsageBar(self)
        layout.addWidget(self.plan_bar)
        layout.addWidget(self.measured_bar)

    def show_view(self, view: VramView, shared_bytes: int | None) -> None:
        total = view.total_bytes or 0
        planned = view.planned
        if planned is not None:
            parts = Components(
                weights_bytes=planned.weights_bytes,
                kv_bytes=planned.kv_bytes,
                compute_bytes=planned.compute_bytes,
                margin_bytes=planned.margin_bytes,
            )
            self.plan_bar.set_data(BarData("Plan", parts, total))
        self.plan_bar.setVisible(planned is not None)
        segments: list[Segment] = []
        if view.process_bytes is not None:
            segments.append(Segment("this app", view.process_bytes, PROCESS_COLOR))
            if view.others_bytes:
                segments.append(Segment("other programs", view.others_bytes, OTHERS_COLOR))
        elif view.used_bytes is not None:
            # NVML does not list this process (WDDM, containers): one segment for all programs.
            segments.append(Segment("used, all programs", view.used_bytes, OTHERS_COLOR))
        if view.free_bytes is not None:
            segments.append(Segment("free", view.free_bytes, None))
        if shared_bytes:
            segments.append(Segment("spilled to shared RAM", shared_bytes, SPILLED_COLOR, hatched=True))
        if view.used_bytes is None and view.process_source == "llama.cpp":
            # The driver reports no use (no VK_EXT_memory_budget): what llama.cpp allocated is all we have.
            caption = (
                f"This app: {format_bytes(view.process_bytes or 0)} of {format_bytes(total)} (llama.cpp's buffers)"
            )
        else:
            used = format_bytes(view.used_bytes) if view.used_bytes is not None else "-"
            caption = f"Measured: {used} of {format_bytes(total)} used"
        if view.process_source == "windows counters":
            caption += " (this app from Windows' counters)"
        self.measured_bar.set_data(
            UsageData(
                caption=caption,
                segments=tuple(segments),
                scale_bytes=max(total, planned.total_bytes if planned else 0),
                marker_bytes=planned.used_bytes if planned is not None and view.process_bytes is not None else None,
                marker_label="plan for this app",
                warn=bool(shared_bytes),
            )
        )


class MetersPanel(QWidget):
    """Live meters for the chat: VRAM by component against the plan, bandwidth, spill, RAM, CPU.

    `sampler_source` is the app's MetersFeed (shared with the status bar) or a Sampler, for which
    the panel makes its own feed. `replan_requested(Pins)` fires when the user accepts the spill
    check's suggestion.
    """

    replan_requested = Signal(object)

    def __init__(self, sampler_source: Sampler | MetersFeed, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.feed = sampler_source if isinstance(sampler_source, MetersFeed) else MetersFeed(sampler_source, self)
        window_s = self.feed.sampler.history_s
        self._gpu_bars: dict[int, _GpuBars] = {}
        self._replan_pins: object | None = None

        inner = QWidget()
        col = QVBoxLayout(inner)
        col.setContentsMargins(6, 6, 6, 6)
        col.setSpacing(8)
        self.status_label = _label("Waiting for the first reading...", small=True)
        col.addWidget(self.status_label)

        # Only for a chat on the hybrid backend: its cache's real bytes against llama.cpp's f16 cache.
        self.kv_box = QGroupBox("KV cache: experimental hybrid backend")
        kv_layout = QVBoxLayout(self.kv_box)
        self.kv_bar = UsageBar()
        kv_layout.addWidget(self.kv_bar)
        self.kv_label = _label()
        self.kv_label.setObjectName("kv_label")
        kv_layout.addWidget(self.kv_label)
        self.kv_box.setVisible(False)
        col.addWidget(self.kv_box)

        self.vram_box = QGroupBox("VRAM")
        self._vram_layout = QVBoxLayout(self.vram_box)
        col.addWidget(self.vram_box)

        ram_box = QGroupBox("System RAM")
        ram_layout = QVBoxLayout(ram_box)
        self.ram_bar = UsageBar()
        ram_layout.addWidget(self.ram_bar)
        self.ram_label = _label(small=True)
        ram_layout.addWidget(self.ram_label)
        col.addWidget(ram_box)

        memory_box = QGroupBox("Memory over time")
        memory_layout = QVBoxLayout(memory_box)
        self.memory_plot = RollingPlot("GiB", window_s)
        memory_layout.addWidget(self.memory_plot)
        col.addWidget(memory_box)

        self.bandwidth_box = QGroupBox("Memory bandwidth while generating")
        bw_layout = QVBoxLayout(self.bandwidth_box)
        self.bandwidth_label = _label()
        bw_layout.addWidget(self.bandwidth_label)
        self.bandwidth_plot = RollingPlot("% of peak", window_s)
        self.bandwidth_plot.set_fixed_max(100)
        bw_layout.addWidget(self.bandwidth_plot)
        col.addWidget(self.bandwidth_box)

        self.spill_box = QGroupBox("Spill")
        spill_layout = QVBoxLayout(self.spill_box)
        self.spill_label = _label()
        spill_layout.addWidget(self.spill_label)
        self.pcie_label = _label(small=True)
        spill_layout.addWidget(self.pcie_label)
        self.pcie_plot = RollingPlot("PCIe GB/s", window_s)
        spill_layout.addWidget(self.pcie_plot)
        self.warning_label = _label()
        self.warning_label.setFrameShape(QFrame.Shape.StyledPanel)
        self.warning_label.setMargin(6)
        spill_layout.addWidget(self.warning_label)
        self.replan_button = QPushButton("Re-plan")
        self.replan_button.clicked.connect(self._on_replan)
        self.replan_button.setVisible(False)
        spill_layout.addWidget(self.replan_button, alignment=Qt.AlignmentFlag.AlignLeft)
        col.addWidget(self.spill_box)

        cpu_box = QGroupBox("CPU")
        cpu_layout = QVBoxLayout(cpu_box)
        self.cpu_label = _label()
        cpu_layout.addWidget(self.cpu_label)
        self.cpu_plot = RollingPlot("% of a core", window_s)
        cpu_layout.addWidget(self.cpu_plot)
        col.addWidget(cpu_box)

        self.gpu_details_label = _label(small=True)
        self.gpu_details_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        col.addWidget(self.gpu_details_label)
        col.addStretch(1)

        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

        self._listener = self.show_readout
        self.feed.add_listener(self._listener)
        feed, listener = self.feed, self._listener
        self.destroyed.connect(lambda: feed.remove_listener(listener))
        latest = self.feed.state.latest()
        if latest is not None:
            self.show_readout(latest)
        else:
            self._hide_gpu_groups()

    # The main window's API
    def set_plan(self, plan: Plan | None) -> None:
        self.feed.set_plan(plan)

    def record_decode(
        self, decode_tps: float, *, context_tokens: int | None = None, duration_s: float | None = None
    ) -> SpillAssessment:
        return self.feed.record_decode(decode_tps, context_tokens=context_tokens, duration_s=duration_s)

    def record_reply(self, stats: GenerationStats) -> None:
        """A llama.cpp reply's measured speed, compared with the plan's prediction (spill detection);
        the context matters, since a long chat is slower without anything having spilled."""
        self.record_decode(stats.decode_tps, context_tokens=stats.context_used, duration_s=stats.decode_s)

    def set_kv_usage(self, usage: KvCacheUsage | None) -> None:
        """The hybrid cache's bytes after the latest tokens; None hides the group (llama.cpp chats)."""
        self.kv_box.setVisible(usage is not None)
        if usage is None:
            return
        self.kv_label.setText(usage.text())
        held = Segment("held", usage.held_bytes, COMPONENT_COLORS["kv"])
        saved = Segment("not held (compressed or dropped)", max(0, usage.full_f16_bytes - usage.held_bytes), None)
        self.kv_bar.set_data(
            UsageData(
                caption=f"f16 full cache for {usage.tokens} tokens: {format_bytes(usage.full_f16_bytes)}",
                segments=(held, saved),
                scale_bytes=max(usage.full_f16_bytes, usage.held_bytes, 1),
            )
        )

    def sizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("M") * 34, 600)

    def _on_replan(self) -> None:
        if self._replan_pins is not None:
            self.replan_requested.emit(self._replan_pins)

    def _hide_gpu_groups(self) -> None:
        self.vram_box.setVisible(False)
        self.bandwidth_box.setVisible(False)
        self.spill_box.setVisible(False)

    # Rendering
    def show_readout(self, readout: MeterReadout) -> None:
        sample = readout.sample
        history = self.feed.state.samples()
        now = sample.time_s
        self._render_status(sample)
        self._render_vram(readout)
        self._render_ram(readout.ram)
        self._render_memory_plot(history, now)
        self._render_bandwidth(readout, history, now)
        self._render_spill(readout, history, now)
        self._render_cpu(readout, history, now)
        self._render_gpu_details(sample)

    def _render_status(self, sample: MeterSample) -> None:
        self.status_label.setForegroundRole(
            QPalette.ColorRole.PlaceholderText if sample.gpus else QPalette.ColorRole.WindowText
        )
        if sample.gpus:
            self.status_label.setText(sample.gpu_status)
        else:
            self.status_label.setText(f"GPU meters are empty: {sample.gpu_status.removeprefix('no GPU meters: ')}.")

    def _render_vram(self, readout: MeterReadout) -> None:
        self.vram_box.setVisible(bool(readout.vram))
        seen = set()
        shared = readout.shared_spilled_bytes
        for position, view in enumerate(readout.vram):
            bars = self._gpu_bars.get(view.index)
            if bars is None:
                bars = self._gpu_bars[view.index] = _GpuBars()
                self._vram_layout.addWidget(bars)
            bars.show_view(view, shared if position == 0 else None)
            seen.add(view.index)
        for index in set(self._gpu_bars) - seen:
            self._gpu_bars.pop(index).deleteLater()
        if len(readout.vram) == 1:
            self.vram_box.setTitle(f"VRAM: {readout.vram[0].name}")
        else:
            self.vram_box.setTitle("VRAM")

    def _render_ram(self, ram: RamView) -> None:
        segments = (
            Segment("this app", ram.process_bytes, PROCESS_COLOR),
            Segment("other programs", ram.others_bytes, OTHERS_COLOR),
            Segment("available", ram.available_bytes, None),
        )
        self.ram_bar.set_data(
            UsageData(
                caption=f"{format_bytes(ram.total_bytes - ram.available_bytes)} of {format_bytes(ram.total_bytes)} used",
                segments=segments,
                scale_bytes=ram.total_bytes,
            )
        )
        if ram.planned_host_bytes is not None:
            self.ram_label.setText(f"The plan puts {format_bytes(ram.planned_host_bytes)} in system RAM.")
        self.ram_label.setVisible(ram.planned_host_bytes is not None)

    def _render_memory_plot(self, history: list[MeterSample], now: float) -> None:
        xs = [s.time_s - now for s in history]
        if any(s.gpus for s in history):
            self.memory_plot.set_series(
                "vram", "VRAM used", SERIES_COLORS["vram"], xs, _gpu0(history, "memory_used_bytes", GIB)
            )
            self.memory_plot.set_series(
                "process",
                "VRAM this app",
                SERIES_COLORS["process"],
                xs,
                _gpu0(history, "process_memory_used_bytes", GIB),
            )
        self.memory_plot.set_series(
            "ram", "RAM this app", SERIES_COLORS["ram"], xs, [s.host.process_rss_bytes / GIB for s in history]
        )

    def _render_bandwidth(self, readout: MeterReadout, history: list[MeterSample], now: float) -> None:
        plan_known = readout.planned_decode_tps is not None
        self.bandwidth_box.setVisible(plan_known or bool(readout.vram))
        self.bandwidth_label.setText(self._bandwidth_text(readout.bandwidth, readout))
        decodes = self.feed.state.decode_history()
        dx = [d.time_s - now for d in decodes]
        if any(s.gpus for s in history):
            # Drawn first, underneath: the controller's busy share is the continuous context for
            # the per-reply points.
            self.bandwidth_plot.set_series(
                "controller",
                "memory controller busy",
                SERIES_COLORS["controller"],
                [s.time_s - now for s in history],
                _gpu0(history, "utilization_memory_pct", 1),
            )
        if any(d.device_bytes_per_token for d in decodes):
            self.bandwidth_plot.set_series(
                "device",
                "GPU achieved",
                SERIES_COLORS["device"],
                dx,
                [100 * d.device_share_of_peak if d.device_share_of_peak is not None else None for d in decodes],
                points=True,
            )
        if any(d.host_bytes_per_token for d in decodes):
            self.bandwidth_plot.set_series(
                "host",
                "RAM achieved",
                SERIES_COLORS["host"],
                dx,
                [100 * d.host_share_of_peak if d.host_share_of_peak is not None else None for d in decodes],
                points=True,
            )

    @staticmethod
    def _bandwidth_text(bw: BandwidthReading | None, readout: MeterReadout) -> str:
        controller = readout.memory_controller_pct
        tail = f" Memory controller busy {controller}% of the time." if controller is not None else ""
        if bw is None:
            if readout.planned_decode_tps is None:
                return "Load a model: bandwidth is worked out from the plan's bytes per token." + tail
            return f"Measured after each reply (plan: {readout.planned_decode_tps:.1f} tokens/s)." + tail
        lines = [f"Last reply: {bw.decode_tps:.1f} tokens/s."]
        if bw.device_bytes_per_token:
            # No GPU has been measured: NVML's bus width x clock (or a profile) is a data-sheet peak.
            peak = (
                f" of {bw.device_peak_gbps:.0f} GB/s peak ({_pct(bw.device_share_of_peak)}; peak from "
                f"{_PEAK_SOURCES.get(bw.device_peak_source or '', bw.device_peak_source)}, assumed, not measured)"
                if bw.device_peak_gbps
                else ""
            )
            lines.append(f"GPU: {bw.device_gbps:.0f} GB/s{peak}.")
        if bw.host_bytes_per_token:
            peak = ""
            if bw.host_peak_gbps:
                what = "measured peak" if bw.host_peak_source.startswith("measured") else "assumed peak"
                when = bw.host_peak_source.removeprefix("measured ").strip()
                label = f"{what}, {when}" if what == "measured peak" else what
                peak = f" of {bw.host_peak_gbps:.1f} GB/s {label} ({_pct(bw.host_share_of_peak)})"
            lines.append(f"System RAM: {bw.host_gbps:.1f} GB/s{peak}.")
        return " ".join(lines) + tail

    def _render_spill(self, readout: MeterReadout, history: list[MeterSample], now: float) -> None:
        summary: SpillSummary | None = readout.spill
        has_gpu_readings = bool(readout.vram)
        self.spill_box.setVisible(summary is not None or has_gpu_readings)
        self.spill_label.setText(" ".join(summary.lines()) if summary is not None else "No plan loaded.")
        sample = readout.sample
        pcie_parts: list[str] = []
        if sample.gpus:
            g = sample.gpus[0]
            if g.pcie_rx_kb_per_s is not None or g.pcie_tx_kb_per_s is not None:
                pcie_parts.append(
                    f"PCIe to GPU {(g.pcie_rx_kb_per_s or 0) / 1e6:.2f} GB/s, from GPU {(g.pcie_tx_kb_per_s or 0) / 1e6:.2f} GB/s."
                )
        if sample.shared is not None:
            pcie_parts.append(f"Shared GPU memory of this app: {format_bytes(sample.shared.shared_bytes)}.")
        elif sample.shared_status:
            pcie_parts.append(f"Shared GPU memory: not read ({sample.shared_status}).")
        self.pcie_label.setText(" ".join(pcie_parts))
        self.pcie_plot.setVisible(has_gpu_readings)
        if has_gpu_readings:
            xs = [s.time_s - now for s in history]
            self.pcie_plot.set_series("rx", "to GPU", SERIES_COLORS["rx"], xs, _gpu0(history, "pcie_rx_kb_per_s", 1e6))
            self.pcie_plot.set_series(
                "tx", "from GPU", SERIES_COLORS["tx"], xs, _gpu0(history, "pcie_tx_kb_per_s", 1e6)
            )
        self._render_assessment(readout.assessment)

    def _render_assessment(self, a: SpillAssessment) -> None:
        self.warning_label.setTextFormat(Qt.TextFormat.RichText)
        self.warning_label.setText(f"<b>{html.escape(a.title)}</b><br>{html.escape(a.text)}")
        color = {"spill": OVER_BUDGET, "slow": WARN_AMBER}.get(a.level)
        # Only the border changes: a font change in a style sheet would not re-measure the wrap.
        self.warning_label.setStyleSheet(
            f"QLabel {{ border: 2px solid {color}; border-radius: 4px; }}" if color is not None else ""
        )
        self._replan_pins = a.replan.pins if a.replan is not None else None
        self.replan_button.setVisible(a.replan is not None)
        if a.replan is not None:
            self.replan_button.setText(f"Re-plan: {a.replan.label}")
            self.replan_button.setToolTip(
                f"Plan again with {a.replan.label}; frees {format_bytes(a.replan.frees_bytes)} of VRAM"
            )

    def _render_cpu(self, readout: MeterReadout, history: list[MeterSample], now: float) -> None:
        h = readout.sample.host
        text = (
            f"This app: {h.process_cpu_pct:.0f}% of one core ({h.logical_cores} logical cores), "
            f"{h.process_threads} threads."
        )
        if readout.plan_threads is not None:
            text += f" The plan generates with {readout.plan_threads} threads."
        self.cpu_label.setText(text)
        self.cpu_plot.set_series(
            "cpu",
            "CPU this app",
            SERIES_COLORS["cpu"],
            [s.time_s - now for s in history],
            [s.host.process_cpu_pct for s in history],
        )

    def _render_gpu_details(self, sample: MeterSample) -> None:
        lines = []
        for g in sample.gpus:
            parts = []
            if g.utilization_gpu_pct is not None:
                parts.append(f"GPU busy {g.utilization_gpu_pct}%")
            if g.clock_graphics_mhz is not None:
                parts.append(f"core {g.clock_graphics_mhz} MHz")
            if g.clock_memory_mhz is not None:
                parts.append(f"memory {g.clock_memory_mhz} MHz")
            if g.temperature_c is not None:
                parts.append(f"{g.temperature_c} °C")
            if g.power_w is not None:
                parts.append(f"{g.power_w:.0f} W")
            if parts:
                lines.append(f"GPU {g.index}: " + ", ".join(parts))
        if lines:
            # Secondary on purpose: low GPU busy with slow generation means the bus, not the cores.
            lines.append("Low GPU busy is normal while generating: memory, not compute, sets the pace.")
        self.gpu_details_label.setText("\n".join(lines))
        self.gpu_details_label.setVisible(bool(lines))


class _MiniBar(QWidget):
    """A status-bar sized bar: this app, other programs, free."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._parts: tuple[tuple[float, str | None], ...] = ()
        self._warn = False

    def set_parts(self, parts: tuple[tuple[float, str | None], ...], warn: bool) -> None:
        self._parts, self._warn = parts, warn
        self.update()

    def sizeHint(self) -> QSize:
        h = self.fontMetrics().height()
        return QSize(h * 5, int(h * 0.7))

    def paintEvent(self, _event: QPaintEvent) -> None:
        p = QPainter(self)
        pal = self.palette()
        rect = self.rect().adjusted(0, 0, -1, -1)
        p.setPen(QColor(OVER_BUDGET) if self._warn else pal.color(QPalette.ColorRole.Mid))
        p.setBrush(pal.color(QPalette.ColorRole.Base))
        p.drawRect(rect)
        x = rect.left() + 1.0
        width = rect.width() - 1
        p.setPen(Qt.PenStyle.NoPen)
        for share, color in self._parts:
            w = width * share
            if color is not None and w > 0:
                p.setBrush(QColor(color))
                p.drawRect(int(x), rect.top() + 1, max(1, round(w)), rect.height() - 1)
            x += w
        p.end()


class MetersStatusWidget(QWidget):
    """One line for the status bar: VRAM (or RAM), last bandwidth, CPU, and a spill flag.

    Clicking it emits `clicked`, for the main window to show the full panel.
    """

    clicked = Signal()

    def __init__(self, source: MetersFeed | MetersPanel | Sampler, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        if isinstance(source, MetersPanel):
            self.feed = source.feed
        elif isinstance(source, MetersFeed):
            self.feed = source
        else:
            self.feed = MetersFeed(source, self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(2, 0, 2, 0)
        layout.setSpacing(6)
        self.bar = _MiniBar(self)
        self.label = QLabel("meters starting...")
        self._kv: KvCacheUsage | None = None
        layout.addWidget(self.bar, alignment=Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(self.label)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._listener = self.show_readout
        self.feed.add_listener(self._listener)
        feed, listener = self.feed, self._listener
        self.destroyed.connect(lambda: feed.remove_listener(listener))
        latest = self.feed.state.latest()
        if latest is not None:
            self.show_readout(latest)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        super().mouseReleaseEvent(event)

    def set_kv_usage(self, usage: KvCacheUsage | None) -> None:
        """Adds the hybrid cache's bytes to the line (None: a llama.cpp chat, nothing added)."""
        self._kv = usage
        latest = self.feed.state.latest()
        if latest is not None:
            self.show_readout(latest)
        else:
            self.label.setText(usage.short_text() if usage is not None else "meters starting...")

    def show_readout(self, readout: MeterReadout) -> None:
        sample = readout.sample
        parts: list[str] = []
        spill = readout.assessment.level == "spill"
        if readout.vram:
            v = readout.vram[0]
            total = v.total_bytes or 1
            process = v.process_bytes if v.process_bytes is not None else 0
            others = v.others_bytes if v.others_bytes is not None else (v.used_bytes or 0)
            self.bar.set_parts(((process / total, PROCESS_COLOR), (others / total, OTHERS_COLOR)), spill)
            if v.used_bytes is None and v.process_bytes is not None:  # the driver reports no use (Vulkan)
                parts.append(f"VRAM this app {format_bytes(v.process_bytes)} / {format_bytes(total)}")
            else:
                parts.append(f"VRAM {format_bytes(v.used_bytes or 0)} / {format_bytes(total)}")
        else:
            ram = readout.ram
            total = ram.total_bytes or 1
            self.bar.set_parts(
                ((ram.process_bytes / total, PROCESS_COLOR), (ram.others_bytes / total, OTHERS_COLOR)), False
            )
            parts.append(f"RAM {format_bytes(ram.process_bytes)} / {format_bytes(ram.total_bytes)}")
        bw = readout.bandwidth
        if bw is not None:
            gbps = bw.device_gbps if bw.device_bytes_per_token else bw.host_gbps
            parts.append(f"{bw.decode_tps:.1f} tok/s, {gbps:.0f} GB/s")
        parts.append(f"CPU {sample.host.process_cpu_pct:.0f}%")
        if self._kv is not None:
            parts.append(self._kv.short_text())
        text = " · ".join(parts)
        if spill:
            text += f' · <b style="color:{SPILLED_COLOR}">spilling</b>'
        elif readout.assessment.level == "slow":
            text += f' · <span style="color:{WARN_AMBER}">slow</span>'
        self.label.setText(text)
        tip = [sample.gpu_status] if not sample.gpus else []
        if readout.assessment.level in ("spill", "slow"):
            tip.append(readout.assessment.text)
        if self._kv is not None:
            tip.append(self._kv.text())
        tip.append("Click for the meter panel.")
        self.setToolTip("\n".join(tip))
