"""One call that gathers the whole Machine. Never raises for a missing GPU, driver or backend."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from vrampilot.hardware.cpu import detect_cpu, detect_ram
from vrampilot.hardware.dxgi import DxgiReading, read_dxgi
from vrampilot.hardware.free_memory import with_free_memory
from vrampilot.hardware.llama_backend import detect_llama_backend, load_llama_cpp
from vrampilot.hardware.nvml import NvmlApi, detect_nvidia_gpus, load_pynvml
from vrampilot.hardware.types import Machine


def detect_machine(
    nvml: NvmlApi | None = None,
    *,
    nvml_loader: Callable[[], NvmlApi] = load_pynvml,
    llama_loader: Callable[[], Any] = load_llama_cpp,
    dxgi_reader: Callable[[], DxgiReading] = read_dxgi,
    platform: str = sys.platform,
) -> Machine:
    """GPUs (NVML), CPU, RAM and the llama.cpp backend. What was measured here before (the speed
    probe's figures and the factors replies taught) is not read here: vrampilot.speed pairs it with
    the machine (`detect_measured_machine`). Takes about 0.1-0.5 s: loading llama-cpp-python's library dominates,
    so the GUI calls this from a worker. On Windows, DXGI's adapters too: each GPU's free memory
    then comes from NVML or DXGI (hardware/free_memory.py)."""
    nvml_result = detect_nvidia_gpus(nvml, loader=nvml_loader)
    llama = detect_llama_backend(llama_loader, nvidia=bool(nvml_result.gpus))
    dxgi = dxgi_reader() if platform == "win32" else DxgiReading((), "")
    llama = with_free_memory(llama, nvml_result.gpus, dxgi.adapters, platform=platform)
    ram_total, ram_available = detect_ram()
    cpu = detect_cpu(system_info=llama.system_info)
    return Machine(
        gpus=nvml_result.gpus,
        cpu=cpu,
        ram_total_bytes=ram_total,
        ram_available_bytes=ram_available,
        nvml_status=nvml_result.status,
        llama=llama,
        nvml_available=nvml_result.available,
        dxgi_adapters=dxgi.adapters,
        dxgi_status=dxgi.status,
    )
