"""The hardware summary shown at the top of the plan panel (first thing a new user sees)."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from vrampilot.hardware import Machine, group_cards, machine_warnings
from vrampilot.llamacpp import SOFTWARE_GPU_ENV, is_software_name
from vrampilot.ui.theme import WARN_AMBER
from vrampilot.units import format_bytes


def hardware_summary_html(m: Machine) -> str:
    lines: list[str] = []
    # Each card once, with the llama.cpp devices that can drive it (an NVIDIA card under CUDA and
    # Vulkan is "CUDA0, also Vulkan1"), the one plans use by default first.
    cards = group_cards(m.llama, m.gpus)
    if m.gpus:
        for g in m.gpus:
            free = f", {format_bytes(g.memory_free_bytes)} free" if g.memory_free_bytes is not None else ""
            driver = f", driver {g.driver_version}" if g.driver_version else ""
            card = next((c for c in cards if c.nvml is not None and c.nvml.index == g.index), None)
            runs = f" ({escape(card.devices_text())})" if card is not None else ""
            lines.append(
                f"<b>GPU {g.index}</b>: {escape(g.name)}, {format_bytes(g.memory_total_bytes)} VRAM{free}{driver}{runs}"
            )
    # GPUs llama.cpp itself offloads to that NVML does not know (AMD, Intel through Vulkan; a
    # software device with VRAMPILOT_SOFTWARE_GPU=1).
    for c in cards:
        if c.nvml is not None:
            continue
        d = c.preferred
        what = "integrated GPU, memory shared with the CPU" if d.kind == "igpu" else "/".join(c.backends)
        if is_software_name(d.description):
            what = f"software {d.backend} device, used: {SOFTWARE_GPU_ENV}=1"
        lines.append(
            f"<b>{escape(c.devices_text())}</b>: {escape(c.name)}, {format_bytes(d.memory_total_bytes)} ({escape(what)})"
        )
    if not lines:
        lines.append("<b>No GPU found: planning for the CPU</b>")
        if m.llama.vulkan_status:
            lines.append(escape(m.llama.vulkan_status))
    cpu = m.cpu
    lines.append(f"<b>CPU</b>: {escape(cpu.model_name)}, {cpu.physical_cores} cores / {cpu.logical_cores} threads")
    lines.append(f"<b>RAM</b>: {format_bytes(m.ram_total_bytes)}, {format_bytes(m.ram_available_bytes)} available")
    for w in machine_warnings(m):
        lines.append(f"<span style='color:{WARN_AMBER}'>{escape(w)}</span>")
    return "<br>".join(lines)


class HardwareView(QLabel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Looking at this machine…", parent)
        self.setObjectName("hardware")
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def set_machine(self, m: Machine) -> None:
        self.setText(hardware_summary_html(m))
