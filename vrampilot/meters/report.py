"""Samples as one line of text or one JSON object: `vrampilot monitor` and the status bar's tooltip.

ASCII only: the Windows console's default code page cannot print arrows or a degree sign.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from vrampilot.hardware import GpuSample
from vrampilot.meters.types import MeterSample
from vrampilot.units import format_bytes


def _gb_per_s(kb_per_s: int | None) -> str:
    # NVML's PCIe counters are KB/s (1000 bytes); bandwidth is quoted in GB/s (10^9).
    return "-" if kb_per_s is None else f"{kb_per_s / 1e6:.2f}"


def _opt(value: object, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def format_gpu(g: GpuSample, name: str | None = None) -> str:
    used = format_bytes(g.memory_used_bytes) if g.memory_used_bytes is not None else "-"
    total = format_bytes(g.memory_total_bytes) if g.memory_total_bytes is not None else "-"
    parts = [f"GPU{g.index}" + (f" {name}" if name else ""), f"VRAM {used} / {total}"]
    if g.process_memory_used_bytes is not None:
        parts.append(f"(this process {format_bytes(g.process_memory_used_bytes)})")
    parts.append(f"util {_opt(g.utilization_gpu_pct, '%')} mem-ctrl {_opt(g.utilization_memory_pct, '%')}")
    parts.append(f"PCIe rx {_gb_per_s(g.pcie_rx_kb_per_s)} tx {_gb_per_s(g.pcie_tx_kb_per_s)} GB/s")
    parts.append(f"{_opt(g.clock_graphics_mhz)}/{_opt(g.clock_memory_mhz)} MHz")
    parts.append(f"{_opt(g.temperature_c, 'C')}")
    parts.append("-" if g.power_w is None else f"{g.power_w:.0f} W")
    return " ".join(parts)


def format_sample(sample: MeterSample, *, names: bool = False) -> str:
    """One line: time, each GPU, shared GPU memory (Windows), RAM, CPU."""
    h = sample.host
    clock = time.strftime("%H:%M:%S", time.localtime(sample.wall_time_s))
    fields = [clock]
    for g in sample.gpus:
        device = sample.device(g.index)
        fields.append(format_gpu(g, device.name if names and device else None))
    if sample.shared is not None:
        fields.append(f"shared GPU mem {format_bytes(sample.shared.shared_bytes)}")
    fields.append(
        f"RAM process {format_bytes(h.process_rss_bytes)}, available {format_bytes(h.ram_available_bytes)}"
        f" of {format_bytes(h.ram_total_bytes)}"
    )
    fields.append(f"CPU {h.process_cpu_pct:.0f}% {h.process_threads} threads")
    return " | ".join(fields)


def sample_to_dict(sample: MeterSample) -> dict[str, Any]:
    """Units in the key names, as in `vrampilot doctor --json`; null means "not readable here"."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(sample.wall_time_s))
        + f".{int(sample.wall_time_s * 1000) % 1000:03d}",
        "monotonic_s": round(sample.time_s, 3),
        "pid": sample.pid,
        "host": {
            "process_rss_bytes": sample.host.process_rss_bytes,
            "process_cpu_pct": round(sample.host.process_cpu_pct, 1),
            "process_threads": sample.host.process_threads,
            "ram_total_bytes": sample.host.ram_total_bytes,
            "ram_available_bytes": sample.host.ram_available_bytes,
        },
        "gpus": [asdict(g) for g in sample.gpus],
        "gpu_status": sample.gpu_status,
        "shared_gpu_memory": asdict(sample.shared) if sample.shared is not None else None,
        "shared_gpu_memory_status": sample.shared_status,
    }
