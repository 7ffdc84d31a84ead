"""The one place that decides whose count of free VRAM a device's budget is.

llama.cpp's device API gives each device's free memory from its backend: CUDA's cudaMemGetInfo,
Vulkan's VK_EXT_memory_budget (or, without the extension, the heap's size whatever is in use). On
Linux those are the driver's own figures and are used as they are. On Windows, Vulkan's budget
is not free memory: NVIDIA's driver reports a constant there and Intel's integrated GPUs more than
the adapter may take; the video memory manager of Windows (WDDM) decides what a process may keep
in VRAM, and two readers ask it or the driver directly:

1. NVML (an NVIDIA card, nvml.dll beside the driver): the driver's free memory;
2. DXGI (any adapter, hardware/dxgi.py): the budget Windows grants this process in the adapter's
   dedicated memory, less what it already uses there; what Task Manager counts;
3. otherwise the backend's own figure, named as such.

A device is matched to its DXGI adapter by LUID (Vulkan's VkPhysicalDeviceIDProperties, read by
llamacpp/vulkan_probe.py); a device without one (a CUDA device: ggml's device API gives no LUID) by
its name and, for a discrete GPU, its memory size within 1 GiB, each adapter taken once.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence
from dataclasses import replace

from vrampilot.hardware.cards import group_cards
from vrampilot.hardware.types import DxgiAdapter, GpuInfo, LlamaBackendInfo, LlamaDevice
from vrampilot.units import GIB

NVML = "NVML"
DXGI = "DXGI"
VULKAN_BUDGET = "Vulkan memory budget"
VULKAN_HEAP = "Vulkan heap size"
# The sources that replace the backend's own figure (what the plan's device line names).
OS_SOURCES = (NVML, DXGI)


def backend_source(backend: str, *, vulkan_budget: bool) -> str:
    """Whose figure llama.cpp's device API gives: the backend's own."""
    if backend == "Vulkan":
        return VULKAN_BUDGET if vulkan_budget else VULKAN_HEAP
    return backend


def match_adapter(
    device: LlamaDevice, adapters: Sequence[DxgiAdapter], taken: Collection[int] = ()
) -> DxgiAdapter | None:
    """The DXGI adapter that is `device`: by LUID, else by name (and size, for a discrete GPU)."""
    gpus = [a for a in adapters if not a.software and a.luid not in taken]
    if device.luid is not None:
        return next((a for a in gpus if a.luid == device.luid), None)
    name = (device.description or device.name).strip().casefold()
    for a in gpus:
        if a.name.casefold() != name:
            continue
        if device.kind == "igpu" or abs(a.dedicated_video_bytes - device.memory_total_bytes) < GIB:
            return a
    return None


def with_free_memory(
    llama: LlamaBackendInfo,
    gpus: Sequence[GpuInfo],
    adapters: Sequence[DxgiAdapter],
    *,
    platform: str = sys.platform,
) -> LlamaBackendInfo:
    """`llama` with each GPU's free memory from the source this platform trusts (the module's
    docstring), and that source named in `LlamaDevice.memory_free_source`."""
    if platform != "win32":
        return llama
    cards = group_cards(llama, gpus)
    taken: set[int] = set()
    devices = []
    for d in llama.devices:
        if d.kind not in ("gpu", "igpu"):
            devices.append(d)
            continue
        card = next((c for c in cards if d in c.devices), None)
        nv = card.nvml if card is not None else None
        adapter = match_adapter(d, adapters, taken)
        if adapter is not None:
            taken.add(adapter.luid)
        if nv is not None and nv.memory_free_bytes is not None:
            d = replace(d, memory_free_bytes=nv.memory_free_bytes, memory_free_source=NVML)
        elif adapter is not None and adapter.local_free_bytes is not None:
            d = replace(d, memory_free_bytes=adapter.local_free_bytes, memory_free_source=DXGI)
        devices.append(d)
    return replace(llama, devices=tuple(devices))
