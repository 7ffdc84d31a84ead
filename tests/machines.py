"""Machines to plan for in tests. Plain data values (what detection returns), not mocks."""

from __future__ import annotations

from vrampilot.hardware import CpuInfo, LlamaBackendInfo, Machine
from vrampilot.units import GIB


def cpu_machine(ram_gib: float = 24, cores: int = 8) -> Machine:
    return Machine(
        gpus=(),
        cpu=CpuInfo("Test CPU", "x86_64", cores, cores * 2, ("avx", "avx2", "fma", "f16c")),
        ram_total_bytes=int(ram_gib * GIB),
        ram_available_bytes=int(ram_gib * GIB),
        nvml_status="NVML not available",
        llama=LlamaBackendInfo("0.3.36", False, None, None),
    )
