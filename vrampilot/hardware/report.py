"""The Machine as data (`vrampilot doctor --json`) and as text (`vrampilot doctor`)."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from vrampilot.hardware.cards import Card, group_cards
from vrampilot.hardware.types import DxgiAdapter, GpuInfo, Machine
from vrampilot.units import format_bytes

# Windows has no CUDA engine: nvcc builds only with MSVC there, and the Windows engine is
# cross-built on Linux with MinGW (packaging/). NVIDIA cards run under Vulkan.
WINDOWS_NO_CUDA = (
    "CUDA: not on Windows in this release (nvcc needs Microsoft's compiler there, the Windows engine is built "
    "with MinGW): NVIDIA cards run under Vulkan"
)

# What a user with an NVIDIA card and a build without CUDA is told: where CUDA comes from.
CUDA_VARIANT_HINT = (
    "the CUDA variant of VRAM Pilot has it (VRAM_Pilot-CUDA-<version>-x86_64.AppImage, or the vrampilot-cuda "
    ".deb); from source, `make cuda` builds and installs the CUDA module (about an hour, once)"
)
CUDA_REBUILD_HINT = (
    "this engine has no CUDA backend and no other GPU backend, but an NVIDIA GPU is present, so plans use the CPU: "
    + CUDA_VARIANT_HINT
)
NO_CUDA_NOTE = (
    "an NVIDIA GPU is present but this build has no CUDA backend, so it runs through Vulkan (CUDA is usually "
    "faster at reading prompts): " + CUDA_VARIANT_HINT
)


def machine_warnings(m: Machine, platform: str = sys.platform) -> tuple[str, ...]:
    """Things a user should fix or know before trusting a plan, worst first."""
    out: list[str] = []
    nvidia = [g for g in m.gpus if g.vendor == "NVIDIA"]
    cuda_devices = any(d.backend == "CUDA" for d in m.llama.devices)
    if m.llama.error:
        out.append(m.llama.error)
    elif nvidia and platform == "win32" and not cuda_devices:
        # The hints below name Linux packages and `make cuda`: neither exists on Windows.
        if m.llama.supports_gpu_offload is False:
            out.append(
                f"an NVIDIA GPU is present but no GPU backend runs here, so plans use the CPU; {WINDOWS_NO_CUDA}"
            )
    elif nvidia and m.llama.cuda_status is not None and not cuda_devices:
        out.append(m.llama.cuda_status)  # the module is here but cannot run: no driver, or an old one
    elif nvidia and m.llama.supports_gpu_offload is False:
        why = m.llama.gpu_build_note
        out.append(CUDA_REBUILD_HINT + (f". When the engine was built: {why}" if why else ""))
    elif nvidia and m.llama.supports_gpu_offload and m.llama.cuda_status is None and not cuda_devices:
        out.append(NO_CUDA_NOTE)
    if m.llama.backend_mode in ("static", "ggml-score"):
        out.append(
            "llama-cpp-python was not built by VRAM Pilot's engine recipe, so nothing checks that its CPU code"
            " runs here; reinstall it with `python packaging/engine/build.py --install` (what `make run` does)"
        )
    for g in m.gpus:
        if g.memory_total_bytes <= 0:
            out.append(f"GPU {g.index} ({g.name}): NVML did not report its memory size; it cannot be planned for")
        if g.peak_bandwidth_gbps is None:
            out.append(
                f"GPU {g.index} ({g.name}): memory bandwidth unknown (not readable and no matching profile);"
                " speed predictions will be rough"
            )
        if g.display_active:
            out.append(
                f"GPU {g.index} ({g.name}) also drives a display: the desktop uses part of its memory,"
                " so plans keep a larger margin"
            )
    return tuple(out)


def machine_to_dict(m: Machine) -> dict[str, Any]:
    """JSON-safe: only str, int, float, bool, None, lists and dicts."""
    return {
        "gpus": [asdict(g) for g in m.gpus],
        "cpu": {
            "model_name": m.cpu.model_name,
            "architecture": m.cpu.architecture,
            "physical_cores": m.cpu.physical_cores,
            "logical_cores": m.cpu.logical_cores,
            "features": list(m.cpu.features),
        },
        "ram": {"total_bytes": m.ram_total_bytes, "available_bytes": m.ram_available_bytes},
        "nvml": {"available": m.nvml_available, "status": m.nvml_status},
        "dxgi": {"status": m.dxgi_status, "adapters": [asdict(a) | {"luid": a.luid_text} for a in m.dxgi_adapters]},
        "llama_cpp": {
            "version": m.llama.version,
            "supports_gpu_offload": m.llama.supports_gpu_offload,
            "system_info": m.llama.system_info,
            "error": m.llama.error,
            "cpu_variant": m.llama.cpu_variant,
            "cpu_dispatch": m.llama.cpu_dispatch,
            "backend_mode": m.llama.backend_mode,
            "recipe_key": m.llama.recipe_key,
            "backends": list(m.llama.backends),
            "backend_failures": list(m.llama.backend_failures),
            "devices": [asdict(d) for d in m.llama.devices],
            "gpu_build_note": m.llama.gpu_build_note,
            "vulkan_status": m.llama.vulkan_status,
            "cuda_status": m.llama.cuda_status,
        },
        # Each physical GPU once, with the llama.cpp devices that drive it (hardware/cards.py).
        "cards": [_card_dict(c) for c in group_cards(m.llama, m.gpus)],
        "warnings": list(machine_warnings(m)),
    }


def _card_dict(c: Card) -> dict[str, Any]:
    return {
        "name": c.name,
        "pci_bus_id": c.pci_bus_id,
        "devices": [d.name for d in c.devices],
        "backends": list(c.backends),
        "default_device": c.preferred.name,
        "nvml_index": c.nvml.index if c.nvml is not None else None,
        "memory_total_bytes": c.preferred.memory_total_bytes,
    }


def _card_line(c: Card) -> str:
    """ "GPU card: NVIDIA GeForce RTX 4090 (CUDA0, also Vulkan1) at 0000:01:00.0": the device a
    plan uses by default first."""
    where = f" at {c.pci_bus_id}" if c.pci_bus_id else ""
    nv = f", NVML GPU {c.nvml.index}" if c.nvml is not None else ""
    return f"GPU card: {c.label()}{where}{nv}"


def _gpu_lines(g: GpuInfo) -> list[str]:
    memory = f"{format_bytes(g.memory_total_bytes)} total"
    if g.memory_free_bytes is not None:
        memory += f", {format_bytes(g.memory_free_bytes)} free"
    lines = [f"GPU {g.index}: {g.name} ({g.vendor}), {memory}"]
    if g.peak_bandwidth_gbps is not None:
        bw = f"bandwidth {g.peak_bandwidth_gbps:.0f} GB/s"
        if g.bandwidth_source == "nvml":
            bw += f" (NVML: {g.memory_bus_width_bits}-bit bus, {g.memory_clock_max_mhz} MHz memory clock)"
        else:
            bw += f" ({g.bandwidth_source})"
    else:
        bw = "bandwidth unknown"
    details = [bw]
    if g.fp16_tflops is not None:
        details.append(f"~{g.fp16_tflops:g} FP16 TFLOPS (profile)")
    if g.pcie_generation is not None or g.pcie_width is not None:
        gen = g.pcie_generation if g.pcie_generation is not None else "?"
        width = g.pcie_width if g.pcie_width is not None else "?"
        details.append(f"PCIe gen {gen} x{width}")
    if g.display_active is not None:
        details.append("drives a display" if g.display_active else "no display")
    lines.append("  " + ", ".join(details))
    versions = []
    if g.driver_version:
        versions.append(f"driver {g.driver_version}")
    if g.cuda_version:
        versions.append(f"CUDA {g.cuda_version}")
    if g.uuid:
        versions.append(g.uuid)
    if versions:
        lines.append("  " + ", ".join(versions))
    return lines


def _dxgi_line(a: DxgiAdapter) -> str:
    """ "NVIDIA GeForce RTX 4070 (LUID 0x00000000_0x0000D1A2): dedicated 12 GiB, budget 11.2 GiB, 0 B
    in use here; shared GPU memory 15.9 GiB": what Windows grants this process."""
    text = f"{a.name} (LUID {a.luid_text}): dedicated {format_bytes(a.dedicated_video_bytes)}"
    if a.local_budget_bytes is not None and a.local_usage_bytes is not None:
        text += f", budget {format_bytes(a.local_budget_bytes)}, {format_bytes(a.local_usage_bytes)} in use here"
    shared = a.non_local_budget_bytes if a.non_local_budget_bytes is not None else a.shared_system_bytes
    return text + f"; shared GPU memory {format_bytes(shared)}"


def format_machine(m: Machine, platform: str = sys.platform) -> str:
    """Readable report for `vrampilot doctor`."""
    lines: list[str] = []
    for g in m.gpus:
        lines.extend(_gpu_lines(g))
    if not m.gpus:
        lines.append("GPU: none")
    lines.append(m.nvml_status)
    if m.dxgi_status:
        lines.append(m.dxgi_status)
        lines.extend(f"  {_dxgi_line(a)}" for a in m.dxgi_adapters if not a.software)
    cpu = m.cpu
    lines.append(
        f"CPU: {cpu.model_name} ({cpu.architecture}), {cpu.physical_cores} cores / {cpu.logical_cores} threads"
    )
    lines.append(f"  features: {' '.join(cpu.features) if cpu.features else 'unknown'}")
    lines.append(f"RAM: {format_bytes(m.ram_total_bytes)} total, {format_bytes(m.ram_available_bytes)} available")
    llama = m.llama
    if llama.error:
        lines.append(f"llama.cpp: {llama.error}")
    else:
        # A build with a GPU backend that cannot run here (the CUDA module without a driver, Vulkan
        # without a device) is not a CPU-only build: its own line below says why.
        not_here = "no (no GPU backend of this build runs here)" if llama.cuda_status or llama.vulkan_status else ""
        offload = {True: "yes", False: not_here or "no (CPU-only build)", None: "unknown"}[llama.supports_gpu_offload]
        lines.append(f"llama.cpp: llama-cpp-python {llama.version or '?'}, GPU offload: {offload}")
        if llama.cpu_dispatch:
            lines.append(f"  CPU code: {llama.cpu_dispatch}")
        if llama.backends:
            recipe = (
                f" (engine recipe {llama.recipe_key})" if llama.recipe_key else " (not built by VRAM Pilot's recipe)"
            )
            lines.append(f"  backends: {', '.join(llama.backends)}{recipe}")
        for failure in llama.backend_failures:
            lines.append(f"  not loaded: {failure}")
        if llama.vulkan_status:
            lines.append(f"  {llama.vulkan_status}")
        if llama.cuda_status:
            lines.append(f"  {llama.cuda_status}")
        elif platform == "win32":
            lines.append(f"  {WINDOWS_NO_CUDA}")
        for d in llama.devices:
            kind = {"igpu": "integrated GPU, memory shared with the CPU", "gpu": "GPU", "cpu": "CPU"}.get(
                d.kind, d.kind
            )
            source = f" ({d.memory_free_source})" if d.memory_free_source else ""
            lines.append(
                f"  device {d.name}: {d.description} ({kind}), {format_bytes(d.memory_free_bytes)} free{source} "
                f"of {format_bytes(d.memory_total_bytes)}"
            )
        lines.extend("  " + _card_line(c) for c in group_cards(llama, m.gpus))
        if llama.gpu_build_note:
            lines.append(f"  GPU backends not in this engine: {llama.gpu_build_note}")
        if llama.system_info:
            lines.append(f"  {llama.system_info}")
    warnings = machine_warnings(m, platform)
    if warnings:
        lines.append("Warnings:")
        lines.extend(f"  - {w}" for w in warnings)
    return "\n".join(lines)
