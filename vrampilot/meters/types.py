"""What the meters read, as frozen values that cross from the sampling thread to the GUI and CLI.

Units live in the names, as everywhere in the app. `None` means "cannot be read here", never zero:
the panel shows a dash and says why instead of drawing an empty bar that looks like a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.hardware import GpuInfo, GpuSample


@dataclass(frozen=True)
class HostSample:
    """Process and system memory and CPU at one moment (psutil).

    `process_cpu_pct` is psutil's convention: 100 means one core fully busy, so an over-threaded
    process shows 400+ on a machine whose other cores are then starved.
    """

    process_rss_bytes: int
    process_cpu_pct: float
    process_threads: int
    ram_total_bytes: int
    ram_available_bytes: int
    logical_cores: int


@dataclass(frozen=True)
class SharedGpuMemory:
    """A process's GPU memory as Windows' performance counters see it (`GPU Process Memory`).

    `shared_bytes` is system RAM the driver maps for the GPU: where CUDA's sysmem fallback puts what
    did not fit in VRAM. `dedicated_bytes` is the process's VRAM, which NVML cannot report per
    process under WDDM.
    """

    shared_bytes: int
    dedicated_bytes: int | None = None


@dataclass(frozen=True)
class MeterSample:
    """One tick of the sampler: everything read at `time_s` (the sampler's monotonic clock).

    `devices` are the static facts of the GPUs being sampled (name, total, peak bandwidth), the same
    tuple on every sample; `gpu_status` is one line for a person, e.g. why `gpus` is empty.
    """

    time_s: float
    wall_time_s: float
    pid: int
    host: HostSample
    gpus: tuple[GpuSample, ...]
    devices: tuple[GpuInfo, ...]
    gpu_status: str
    shared: SharedGpuMemory | None
    shared_status: str | None

    def device(self, index: int) -> GpuInfo | None:
        return next((d for d in self.devices if d.index == index), None)
