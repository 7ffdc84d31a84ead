"""A placement's predicted bytes next to llama.cpp's buffers, per device and for the host.

Loads the model for real (without mmap, so each host buffer holds exactly its tensors, as
llama-server's --load-mode none does) with the plan's CPU overrides, and reports, for the devices
and the host, what the memory model says (the formula, and the plan made exact by llama.cpp's dry
run, as `plan(exact=True)` makes it) and what llama.cpp printed. Used in-process on the CPU and
in a child process on the lavapipe Vulkan device (tests/gpu/moe_child.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.log_lines import MeasuredBuffers
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.breakdown import Components, MemoryBreakdown, memory_breakdown
from vrampilot.planner.memory.compute import FORMULA
from vrampilot.planner.search.measured_graph import measured_graph  # the plan's own route from a dry run to its buffers
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target


def _components(c: Components) -> dict[str, int]:
    return {"weights": c.weights_bytes, "kv": c.kv_bytes, "compute": c.compute_bytes, "output": c.output_bytes}


def _predicted(m: MemoryBreakdown) -> dict[str, Any]:
    return {"devices": [_components(d) for d in m.per_device], "host": _components(m.host)}


def measured_split(m: MeasuredBuffers, device_names: list[str]) -> dict[str, Any]:
    """llama.cpp's buffers summed per device (its name) and for the host (every other buffer:
    CPU, CPU_REPACK, Vulkan_Host, ...)."""

    def split(buffers: dict[str, int]) -> tuple[list[int], int]:
        per = [buffers.get(n, 0) for n in device_names]
        return per, sum(v for k, v in buffers.items() if k not in device_names)

    w, hw = split(m.model_bytes)
    kv, hkv = split(m.kv_buffer_bytes)
    c, hc = split(m.compute_bytes)
    devices = [{"weights": w[i], "kv": kv[i], "compute": c[i], "output": 0} for i in range(len(device_names))]
    host = {"weights": hw, "kv": hkv, "compute": hc, "output": m.output_bytes}
    return {"devices": devices, "host": host, "buffers": dict(m.model_bytes), "kv_lines": len(m.kv_lines)}


def compare(path: Path, settings: Settings, target: Target) -> dict[str, Any]:
    """{"formula", "exact", "measured"}: each {"devices": [{weights, kv, compute, output}], "host": {...}}."""
    spec = load_model_spec(path)
    formula = memory_breakdown(spec, settings, target, FORMULA)
    learned = measured_graph(spec, target, settings, FORMULA)
    exact = memory_breakdown(spec, settings, target, learned) if learned is not None else formula
    names = [g.buffer_name or g.name for g in target.gpus] if formula.per_device else []
    real = measure_allocations(path, settings, dry_run=False, mmap=False)
    return {
        "formula": _predicted(formula),
        "exact": _predicted(exact),
        "measured": measured_split(real, names),
        "refused": real.refused,
        "device_names": names,
    }
