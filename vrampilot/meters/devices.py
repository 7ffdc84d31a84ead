"""The GPUs NVML does not see, through llama.cpp's device API: Vulkan (AMD, Intel, and NVIDIA
cards under Vulkan), and any offload device when NVML is not there.

llama.cpp's device API gives each device's free and total memory. Vulkan drivers with
VK_EXT_memory_budget report real free memory; without it (Mesa's lavapipe, older drivers) the
heap's size is reported as free whatever is allocated, so "used" is left unread (None) rather
than shown as zero, and the process's figure is what llama.cpp allocated there
(vrampilot.llamacpp.allocations). Read only when llama.cpp is already loaded in this process: the
meters never load the engine just to look.
"""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot import llamacpp
from vrampilot.hardware import GpuInfo, GpuSample
from vrampilot.llamacpp import device_allocated_bytes


@dataclass(frozen=True)
class _Watched:
    info: GpuInfo
    llama_name: str  # "Vulkan0"
    reports_use: bool  # the driver's free memory moves with allocations


class LlamaDeviceReader:
    """Reads the offload devices llama.cpp lists, less those NVML covers (`skip_cuda`)."""

    def __init__(self, *, skip_cuda: bool, first_index: int = 0) -> None:
        self._watched: tuple[_Watched, ...] = ()
        self.status = ""
        if not llamacpp.loaded():
            return
        from vrampilot.llamacpp import list_devices, loaded_backends

        backends = loaded_backends()
        budgets = {d.name: d.memory_budget for d in backends.vulkan_devices} if backends is not None else {}
        watched: list[_Watched] = []
        for d in list_devices():
            if not d.offloads or d.backend == "RPC" or (skip_cuda and d.backend == "CUDA"):
                continue
            reports_use = budgets.get(d.description, False) if d.backend == "Vulkan" else True
            info = GpuInfo(
                index=first_index + len(watched),
                name=d.description or d.name,
                uuid=d.device_id,
                vendor=d.backend,
                memory_total_bytes=d.memory_total_bytes,
                memory_free_bytes=d.memory_free_bytes if reports_use else None,
                memory_used_bytes=None,
                driver_version=None,
                cuda_version=None,
                memory_bus_width_bits=None,
                memory_clock_max_mhz=None,
                peak_bandwidth_gbps=None,
                bandwidth_source="unknown",
                pcie_generation=None,
                pcie_width=None,
                display_active=None,
                fp16_tflops=None,
            )
            watched.append(_Watched(info, d.name, reports_use))
        self._watched = tuple(watched)
        quiet = [w for w in watched if not w.reports_use]
        names = ", ".join(f"{w.info.name} ({w.llama_name})" for w in watched)
        self.status = f"llama.cpp devices: {names}" if watched else ""
        if quiet:
            self.status += (
                "; " + ", ".join(w.llama_name for w in quiet) + ": the driver reports no memory use "
                "(no VK_EXT_memory_budget), this app's figure is llama.cpp's own buffers"
            )

    @property
    def devices(self) -> tuple[GpuInfo, ...]:
        return tuple(w.info for w in self._watched)

    def read(self, *, this_process: bool = True) -> tuple[GpuSample, ...]:
        """`this_process`: the meters watch this process (not a llama-server child, whose buffers
        this process's record does not hold)."""
        if not self._watched:
            return ()
        from vrampilot.llamacpp import list_devices

        memory = {d.name: (d.memory_free_bytes, d.memory_total_bytes) for d in list_devices()}
        out = []
        for w in self._watched:
            free, total = memory.get(w.llama_name, (None, None))
            used = total - free if w.reports_use and free is not None and total is not None else None
            out.append(
                GpuSample(
                    index=w.info.index,
                    memory_total_bytes=total,
                    memory_used_bytes=used,
                    memory_free_bytes=free if used is not None else None,
                    utilization_gpu_pct=None,
                    utilization_memory_pct=None,
                    pcie_rx_kb_per_s=None,
                    pcie_tx_kb_per_s=None,
                    clock_graphics_mhz=None,
                    clock_memory_mhz=None,
                    temperature_c=None,
                    power_w=None,
                    process_memory_used_bytes=device_allocated_bytes(w.llama_name) if this_process else None,
                    process_memory_source="llama.cpp",
                )
            )
        return tuple(out)
