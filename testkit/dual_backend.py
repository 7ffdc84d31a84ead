"""Machines with NVIDIA cards that an engine with CUDA and Vulkan lists twice, as plain data.

The devices are what ggml's registry reports for such a card (vrampilot.llamacpp.devices), in its
registration order (ggml_backend_load_all_from_path: CUDA before Vulkan, the CPU last): the CUDA
device's id from cudaDeviceGetPCIBusId lower-cased, the Vulkan device's from VK_EXT_pci_bus_info
("%04x:%02x:%02x.%x") or none where the driver lacks the extension. NVML is the project's one test
double (testkit/fake_nvml.py), read by the real detection code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from testkit.fake_nvml import FakeGpu, FakeNvml
from testkit.machines import cpu_machine
from vrampilot.hardware import LlamaBackendInfo, LlamaDevice, Machine, detect_nvidia_gpus
from vrampilot.units import GIB, MIB

RTX_4090 = FakeGpu()  # NVML's view of an RTX 4090 at bus 01 (FakeGpu's defaults)
CPU_DEVICE = LlamaDevice("CPU", "Test CPU", "cpu", "CPU", 24 * GIB, 24 * GIB)


def cuda_device(index: int, gpu: FakeGpu, bus: int) -> LlamaDevice:
    # cudaMemGetInfo: the CUDA context takes a few hundred MiB before anything is loaded.
    return LlamaDevice(
        f"CUDA{index}",
        gpu.name,
        "gpu",
        "CUDA",
        gpu.memory_total_bytes - 700 * MIB,
        gpu.memory_total_bytes,
        f"0000:{bus:02x}:00.0",
        True,
    )


def vulkan_device(index: int, gpu: FakeGpu, bus: int | None) -> LlamaDevice:
    # The device-local heap with VK_EXT_memory_budget's reading of what is in use.
    return LlamaDevice(
        f"Vulkan{index}",
        gpu.name,
        "gpu",
        "Vulkan",
        gpu.memory_total_bytes - 400 * MIB,
        gpu.memory_total_bytes,
        f"0000:{bus:02x}:00.0" if bus is not None else None,
        True,
    )


def nvidia_machine(
    gpus: Sequence[FakeGpu] = (RTX_4090,),
    *,
    cuda: bool = True,
    vulkan: bool = True,
    vulkan_ids: bool = True,
    extra: Sequence[LlamaDevice] = (),
) -> Machine:
    """NVIDIA cards at buses 01, 02, ... as NVML and ggml's registry report them: CUDA devices
    first, then Vulkan's (with or without PCI ids), then `extra` (another vendor's Vulkan card),
    then the CPU."""
    nvml = detect_nvidia_gpus(FakeNvml(gpus))
    devices: list[LlamaDevice] = []
    if cuda:
        devices += [cuda_device(i, g, i + 1) for i, g in enumerate(gpus)]
    if vulkan:
        devices += [vulkan_device(i, g, i + 1 if vulkan_ids else None) for i, g in enumerate(gpus)]
    devices += [replace(d, name=f"Vulkan{len(gpus) * vulkan + k}") for k, d in enumerate(extra)]
    devices.append(CPU_DEVICE)
    backends = tuple(b for b, on in (("CUDA", cuda), ("RPC", True), ("Vulkan", vulkan or bool(extra))) if on)
    llama = LlamaBackendInfo("0.3.36", True, None, None, backends=(*backends, "CPU"), devices=tuple(devices))
    return replace(cpu_machine(), gpus=nvml.gpus, nvml_status=nvml.status, nvml_available=True, llama=llama)
