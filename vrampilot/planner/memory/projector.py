"""The vision projector's memory: its weights and compute buffer, on the device llama.cpp uses.

clip.cpp (tools/mtmd) puts the whole projector on one backend: the device named for it (llama-server
follows --device's first entry), else the first GPU llama.cpp lists, unless offload is off
(--no-mmproj-offload), when it stays on the CPU. The plan keeps it on the CPU too when no layer is
offloaded, so a CPU plan stays a CPU plan. Weights: every tensor's ggml_nbytes (what clip.cpp
counts for the weights, and the "model size" line it prints). Compute: clip.cpp reserves its
graph for its warm-up image (the largest it accepts) and prints one "compute buffer size" line per
backend; no closed formula gives that allocation, so the plan takes it from clip.cpp itself, as
llama.cpp's own --fit does (mtmd_get_memory_usage): the projector is loaded once with its warm-up
on the plan's device (or on the CPU when the plan is for a device this machine lacks, labelled so),
and the sizes are kept per file, device and flash-attention setting.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.gguf import ModelSpec, ProjectorSpec, check_projector, model_input_embd, read_projector
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target

MIB = 1024 * 1024
CLIP_COMPUTE_RE = re.compile(r"reserve_compute_meta:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
CLIP_BACKEND_RE = re.compile(r"CLIP using (\S+) backend")
CLIP_MODEL_SIZE_RE = re.compile(r"model size:\s+([\d.]+) MiB")
# llama_flash_attn_type (llama.h), which mtmd_context_params takes
FLASH_ATTN_DISABLED = 0
FLASH_ATTN_ENABLED = 1


@dataclass(frozen=True)
class ClipBuffers:
    """What clip.cpp printed for one load: the backend it chose and its compute buffers."""

    backend: str
    compute_bytes: dict[str, int]  # per buffer type ("CPU", "Vulkan0", ...), at print resolution
    model_bytes: int  # its "model size" line, at print resolution


def clip_buffers(lines: Iterable[str]) -> ClipBuffers:
    """clip.cpp's load report. With flash attention on "auto" it may reserve twice (the second
    after finding flash attention unsupported): the last reservation is the one kept."""
    backend, model = "", 0
    compute: dict[str, int] = {}
    for line in lines:
        if m := CLIP_BACKEND_RE.search(line):
            backend, compute = m.group(1), {}
        elif m := CLIP_MODEL_SIZE_RE.search(line):
            model = round(float(m.group(1)) * MIB)
        elif m := CLIP_COMPUTE_RE.search(line):
            compute[m.group(1)] = round(float(m.group(2)) * MIB)
    return ClipBuffers(backend, compute, model)


def clip_failure(lines: Iterable[str]) -> str:
    """Why clip.cpp refused a projector, from its log: its first failure line's own reason
    ("unable to find tensor mm.2.weight"), not mtmd's closing "Failed to load CLIP model"."""
    failed = [ln for ln in lines if "failed" in ln.lower() or "error" in ln.lower() or "unable" in ln.lower()]
    return failed[0].strip().rsplit(": ", 1)[-1] if failed else "no reason logged"


@dataclass(frozen=True)
class ProjectorLoad:
    """The projector's bytes in the plan, by where llama.cpp puts them."""

    spec: ProjectorSpec
    device: int  # the offload device's position in the target, -1: the CPU
    weights_bytes: int
    compute_bytes: int  # on the projector's device (the CPU's buffer when device is -1)
    host_compute_bytes: int  # the CPU's own buffer when the projector is on a device
    source: str  # where compute_bytes comes from, in words

    @property
    def device_bytes(self) -> int:
        return self.weights_bytes + self.compute_bytes if self.device >= 0 else 0

    @property
    def host_bytes(self) -> int:
        return self.host_compute_bytes if self.device >= 0 else self.weights_bytes + self.compute_bytes


_cache_lock = threading.Lock()
_measured: dict[tuple[str, int, int, str, bool], ClipBuffers] = {}
_specs: dict[tuple[str, int, int], ProjectorSpec] = {}


def _file_key(p: Path) -> tuple[str, int, int]:
    try:
        st = p.stat()
    except OSError:
        raise UserError(f"{p}: projector file not found") from None
    return str(p.resolve()), st.st_size, st.st_mtime_ns


def projector_spec(path: str | Path) -> ProjectorSpec:
    """The projector's header, read once per file version."""
    p = Path(path)
    key = _file_key(p)
    with _cache_lock:
        if key in _specs:
            return _specs[key]
    spec = read_projector(p)
    with _cache_lock:
        _specs[key] = spec
    return spec


def check_for_model(spec: ModelSpec, path: str | Path) -> ProjectorSpec:
    """The projector at `path`, refused in one line when the model cannot take its embeddings."""
    proj = projector_spec(path)
    check_projector(proj, model_input_embd(spec), spec.path.name)
    return proj


def measure_clip(path: str | Path, device: str | None, flash_attn: bool) -> ClipBuffers:
    """Load the projector as llama.cpp does (with its warm-up reservation) on `device` (llama.cpp's
    name, None: the CPU) and return what clip.cpp printed. Kept per file, device and setting."""
    p = Path(path)
    key = (*_file_key(p), device or "CPU", flash_attn)
    with _cache_lock:
        if key in _measured:
            return _measured[key]
    result = _load_and_report(p, device, flash_attn)
    with _cache_lock:
        _measured[key] = result
    return result


def _load_and_report(p: Path, device: str | None, flash_attn: bool) -> ClipBuffers:
    from vrampilot import llamacpp
    from vrampilot.llamacpp import LOG_LOCK, capture_log, device_handle

    mtmd: Any = llamacpp.load_mtmd()
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = device is not None
    if device is not None:
        params.device = ctypes.c_void_p(device_handle(device))
    params.warmup = True
    params.print_timings = False
    params.flash_attn_type = FLASH_ATTN_ENABLED if flash_attn else FLASH_ATTN_DISABLED
    with LOG_LOCK, capture_log() as lines:
        ctx = mtmd.mtmd_init_from_file(os.fsencode(p), None, params)
        if ctx:
            mtmd.mtmd_free(ctx)
    if not ctx:
        raise UserError(f"{p.name}: llama.cpp cannot load this projector: {clip_failure(lines)}")
    return clip_buffers(lines)


def projector_device(settings: Settings, target: Target) -> int:
    """Where clip.cpp puts the projector: the first offload device, unless the plan keeps it (or
    every layer) on the CPU."""
    if settings.projector_on_cpu or not target.has_gpu or not target.gpus:
        return -1
    return 0


def projector_load(settings: Settings, target: Target) -> ProjectorLoad | None:
    """The projector's bytes for this plan; None when the plan has no projector."""
    if not settings.mmproj_path:
        return None
    spec = projector_spec(settings.mmproj_path)
    where = projector_device(settings, target)
    here = None
    if where >= 0:
        gpu = target.gpus[where]
        here = gpu.llama_name if gpu.llama_name and _present(gpu.llama_name) else None
    measured = measure_clip(spec.path, here, settings.flash_attn)
    cpu_bytes = measured.compute_bytes.get("CPU", 0)
    if where < 0:
        return ProjectorLoad(spec, -1, spec.weight_bytes, cpu_bytes, 0, "clip.cpp's own reservation on the CPU")
    if here is None:
        # The plan's device is not on this machine (a profile): the graph is the same, the CPU's
        # buffer for it is the estimate.
        return ProjectorLoad(
            spec, where, spec.weight_bytes, cpu_bytes, 0, "clip.cpp's reservation on the CPU, as an estimate"
        )
    device_bytes = sum(v for k, v in measured.compute_bytes.items() if k != "CPU")
    return ProjectorLoad(
        spec, where, spec.weight_bytes, device_bytes, cpu_bytes, f"clip.cpp's own reservation on {here}"
    )


def _present(name: str) -> bool:
    from vrampilot.llamacpp import list_devices

    return any(d.name == name for d in list_devices())
