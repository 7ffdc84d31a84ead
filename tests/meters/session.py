"""A scripted chat session on an 8 GB card, for the meter tests and the panel screenshots.

Qwen2.5-7B Q4_K_M at 32K with an f16 cache: the planner's comfortable point on 8 GB (planner.md).
The script: idle desktop -> weights upload (VRAM rising, PCIe busy) -> decoding (memory controller
busy, PCIe quiet) -> a spill (VRAM full, shared memory growing, PCIe busy, GPU mostly idle).

The NVML side is the project's one NVML double. The Windows shared-memory counters are the other
OS boundary the sampler reads; `ScriptedSharedMemory` plays them from a list in step with the GPU
script, the way Windows' `GPU Process Memory` counters would move.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from testkit.fake_nvml import GIB, MIB, FakeClock, FakeGpu, FakeNvml, FakeProcess, FakeReading, hold, ramp
from testkit.gguf_models import write_qwen25_7b_q4_k_m
from testkit.machines import cpu_machine
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.meters.sampler import Sampler
from vrampilot.meters.types import SharedGpuMemory
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import Target, TargetRequest, resolve_target

# The sampler reads this real process through psutil and asks NVML about the same pid.
PID = os.getpid()
OTHERS = 600 * MIB  # desktop, browser and the driver's reserve
# RTX 4060 Ti 8GB as NVML reports it: 128-bit at 9001 MHz -> 288 GB/s peak.
GPU = FakeGpu(
    name="NVIDIA GeForce RTX 4060 Ti", memory_total_bytes=8 * GIB, memory_bus_width_bits=128, memory_clock_max_mhz=9001
)
PEAK_GBPS = 128 / 8 * 9001 * 2 / 1000  # 288.03

LOAD_STEPS = 6
DECODE_STEPS = 10
SPILL_STEPS = 10
SHARED_BASE = 40 * MIB  # what Windows maps for any CUDA process
SHARED_SPILLED = 552 * MIB  # +512 MiB spilled


def qwen7b(tmp: Path) -> ModelSpec:
    return load_model_spec(write_qwen25_7b_q4_k_m(tmp / "Qwen2.5-7B-Instruct-Q4_K_M.gguf"))


def gpu8() -> Target:
    return resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine())


def plan_32k(spec: ModelSpec) -> Plan:
    return plan(spec, gpu8(), Pins(n_ctx=32768))


def readings(process_bytes: int) -> dict[str, tuple[FakeReading, ...]]:
    """The phases, with this process ending at `process_bytes` of VRAM once loaded."""
    idle = FakeReading(memory_used_bytes=OTHERS, processes=(FakeProcess(PID, 0),))
    loaded = FakeReading(
        memory_used_bytes=OTHERS + process_bytes,
        pcie_rx_kb_per_s=12_000_000,
        utilization_gpu_pct=5,
        clock_graphics_mhz=2535,
        clock_memory_mhz=9001,
        temperature_c=48,
        power_mw=60_000,
        processes=(FakeProcess(PID, process_bytes),),
    )
    decoding = loaded.with_(
        pcie_rx_kb_per_s=2_000,
        pcie_tx_kb_per_s=1_000,
        utilization_gpu_pct=62,
        utilization_memory_pct=91,
        temperature_c=67,
        power_mw=155_000,
    )
    spilling = decoding.with_(
        memory_used_bytes=8 * GIB,
        pcie_rx_kb_per_s=9_000_000,
        pcie_tx_kb_per_s=3_000_000,
        utilization_gpu_pct=14,
        utilization_memory_pct=9,
        power_mw=70_000,
    )
    return {
        "idle": hold(idle, 2),
        "load": ramp(idle, loaded, LOAD_STEPS),
        "decode": hold(decoding, DECODE_STEPS),
        "spill": hold(spilling, SPILL_STEPS),
    }


def script(process_bytes: int, *, spill: bool = True) -> tuple[FakeReading, ...]:
    r = readings(process_bytes)
    return r["idle"] + r["load"] + r["decode"] + (r["spill"] if spill else r["decode"])


class ScriptedSharedMemory:
    """Windows' `GPU Process Memory` counters for one process, moving with the NVML script."""

    reason: str | None = None

    def __init__(self, nvml: FakeNvml, values: Sequence[int]) -> None:
        self._nvml = nvml
        self._values = values

    def read(self) -> SharedGpuMemory | None:
        value = self._values[min(self._nvml.step, len(self._values) - 1)]
        return SharedGpuMemory(shared_bytes=value, dedicated_bytes=None)

    def close(self) -> None:
        pass


def shared_script(spill: bool = True) -> list[int]:
    before = 2 + LOAD_STEPS + DECODE_STEPS
    return [SHARED_BASE] * before + [SHARED_SPILLED if spill else SHARED_BASE] * SPILL_STEPS


@dataclass
class Session:
    """A sampler over the scripted GPU; `step()` takes one sample and moves time by one interval."""

    nvml: FakeNvml
    clock: FakeClock
    sampler: Sampler

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self.sampler.sample_once()
            self.nvml.tick()
            self.clock.advance(self.sampler.interval_s)

    @property
    def now(self) -> float:
        return self.clock()


def session(
    process_bytes: int,
    *,
    spill: bool = True,
    windows: bool = True,
    nvml: FakeNvml | None = None,
    history_s: float = 300.0,
) -> Session:
    nvml = nvml or FakeNvml([replace(GPU, readings=script(process_bytes, spill=spill))])
    clock = FakeClock(1000.0)
    shared = ScriptedSharedMemory(nvml, shared_script(spill)) if windows else None
    sampler = Sampler(interval_s=0.5, history_s=history_s, nvml=nvml, shared_reader=shared, clock=clock)
    return Session(nvml, clock, sampler)
