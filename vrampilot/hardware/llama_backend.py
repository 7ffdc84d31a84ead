"""What the installed llama-cpp-python can do: its version and whether it was built with a GPU
backend. A CPU-only wheel on a machine with an NVIDIA card is the most common reason for slow
generation, so the doctor reports it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from vrampilot.hardware.types import LlamaBackendInfo, LlamaDevice
from vrampilot.llamacpp import loaded_backends


def load_llama_cpp() -> Any:
    from vrampilot import llamacpp

    return llamacpp.load()


def _call(fn: Callable[[], Any] | None) -> Any:
    if fn is None:
        return None
    try:
        return fn()
    except Exception:
        return None


def detect_llama_backend(loader: Callable[[], Any] = load_llama_cpp, *, nvidia: bool = False) -> LlamaBackendInfo:
    """Never raises: a missing or broken llama-cpp-python is reported in `error`. `nvidia`: NVML
    sees an NVIDIA card here (the build note names the CUDA route only then)."""
    try:
        llama_cpp = loader()
    except ImportError as exc:
        return LlamaBackendInfo(None, None, None, f"llama-cpp-python is not installed ({exc})")
    except Exception as exc:  # the shared library can fail to load (missing CUDA runtime, ...)
        return LlamaBackendInfo(None, None, None, f"llama-cpp-python failed to load: {type(exc).__name__}: {exc}")
    version = getattr(llama_cpp, "__version__", None)
    # What vrampilot.llamacpp loaded into this process belongs to the real llama_cpp only.
    loaded = loaded_backends() if sys.modules.get("llama_cpp") is llama_cpp else None
    if loaded is not None and loaded.mode != "static":
        # llama_supports_gpu_offload() also says yes for the RPC backend, which every build of
        # the recipe carries: what counts is a GPU backend registered here.
        offload: object = any(name not in ("CPU", "RPC") for name in loaded.registered)
    else:
        offload = _call(getattr(llama_cpp, "llama_supports_gpu_offload", None))
    devices = _devices() if loaded is not None else ()
    raw = _call(getattr(llama_cpp, "llama_print_system_info", None))
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    system_info = raw.strip() if isinstance(raw, str) else None
    return LlamaBackendInfo(
        version=str(version) if version is not None else None,
        supports_gpu_offload=None if offload is None else bool(offload),
        system_info=system_info or None,
        error=None,
        cpu_variant=loaded.cpu_variant if loaded else None,
        cpu_dispatch=loaded.describe_cpu() if loaded else None,
        backend_mode=loaded.mode if loaded else None,
        recipe_key=loaded.recipe_key if loaded else None,
        backends=loaded.registered if loaded else (),
        backend_failures=tuple(f"{name}: {why}" for name, why in loaded.failed) if loaded else (),
        devices=devices,
        gpu_build_note=_gpu_build_note(loaded.lib_dir, has_cuda_module=loaded.cuda is not None, nvidia=nvidia)
        if loaded
        else None,
        vulkan_status=loaded.vulkan if loaded else None,
        cuda_status=loaded.cuda if loaded else None,
    )


def _devices() -> tuple[LlamaDevice, ...]:
    from vrampilot.hardware.free_memory import backend_source
    from vrampilot.llamacpp import list_devices

    try:
        found = list_devices()
    except (OSError, RuntimeError, AttributeError):
        return ()
    loaded = loaded_backends()
    # The Vulkan probe's record of each Vulkan device (its budget extension, its LUID): ggml names
    # a device by the driver's device name, in the loader's order, so same-named ones pair in order.
    probed = list(loaded.vulkan_devices) if loaded is not None else []
    out = []
    for d in found:
        if d.backend == "RPC":  # hosts are the plan's business (vrampilot.hardware.rpc), not this machine's
            continue
        vk = next((v for v in probed if v.name == d.description), None) if d.backend == "Vulkan" else None
        if vk is not None:
            probed.remove(vk)
        out.append(
            LlamaDevice(
                d.name,
                d.description,
                d.kind,
                d.backend,
                d.memory_free_bytes,
                d.memory_total_bytes,
                d.device_id,
                d.asynchronous,
                luid=vk.luid if vk is not None else None,
                memory_free_source=backend_source(d.backend, vulkan_budget=vk is not None and vk.memory_budget)
                if d.kind in ("gpu", "igpu")
                else "",
            )
        )
    return tuple(out)


# Where a CUDA backend comes from when the engine was built without one.
CUDA_MODULE_HINT = "a module of its own: the CUDA installers carry it, `make cuda` builds it"


def _gpu_build_note(lib_dir: str, *, has_cuda_module: bool, nvidia: bool, platform: str = sys.platform) -> str | None:
    """What the engine's recipe said about GPU backends it did not build (its manifest). The CUDA
    backend is the user's concern only with an NVIDIA card (NVML sees one) and no CUDA module beside
    the engine, and never on Windows, which has none (doctor's own line says so:
    report.WINDOWS_NO_CUDA); then the note names the product's route (CUDA_MODULE_HINT: a module
    that needs no CUDA toolkit), not why the build machine skipped it (a missing nvcc or cuBLAS
    there is no step for this user)."""
    from pathlib import Path

    from vrampilot.llamacpp import read_manifest

    manifest = read_manifest(Path(lib_dir)) or {}
    skipped = manifest.get("gpu_skipped")
    if not isinstance(skipped, dict):
        return None
    notes = []
    for name, why in skipped.items():
        if name == "cuda":
            if nvidia and not has_cuda_module and platform != "win32":
                notes.append(f"cuda ({CUDA_MODULE_HINT})")
        else:
            notes.append(f"{name}: {why}")
    return "; ".join(notes) or None
