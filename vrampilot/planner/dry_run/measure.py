"""Ask llama.cpp itself what a configuration allocates: the ground truth the planner is tested against.

llama.cpp logs every buffer it creates. We load the model with llama-cpp-python's low-level API on
the CPU, capture that log with `llama_log_set` (restoring the previous callback afterwards), and
parse the buffer lines (log_lines.py). The dry runs a plan asks for while it plans, with
headers kept loaded, are graph.py's; they load and log through the helpers here.

The dry run (`dry_run=True`, the default) is llama.cpp's own `--fit` trick: `no_alloc` with
`LLAMA_LOAD_MODE_NONE` simulates every allocation without reading a weight (~0.1-0.5 s, works on
header-only files). In that mode the model and KV "buffer size" lines print 0.00; the KV `size =`
lines and the compute-buffer lines are the real values. `dry_run=False` allocates for real (mmap)
and also reports model and KV buffers.
"""

from __future__ import annotations

import ctypes
import functools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.llamacpp import LOG_LOCK, CpuOverrides
from vrampilot.planner.dry_run.log_lines import MeasuredBuffers, parse_buffers, refusal_reason
from vrampilot.planner.memory.kv import ggml_type, kv_unified
from vrampilot.planner.memory.placement import AMX_VARIANTS, cpu_override_patterns, no_repack_reason
from vrampilot.planner.settings import Settings

# ggml_log_level (ggml.h)
_LOG_DEBUG, _LOG_INFO, _LOG_WARN, _LOG_ERROR, _LOG_CONT = 1, 2, 3, 4, 5

# llama.cpp's log callback is process-global, and buffer sizes are only in its log: whoever parses
# it (these measurements, the engine's load errors) holds this lock while llama.cpp logs for them.
_lock = LOG_LOCK
_backend_ready = False


# A dry run still allocates one thing in proportion to the context: each KV cache's table of cells
# (llama-kv-cells.h: position 4 bytes, extension 8, shift 4, its set of sequences 32), on the host,
# since no_alloc skips only the tensors. `plan --ctx 30000000` took 1.5 GB for a plan that did not
# fit, and 99999999999 (wrapped into 32 bits) ran past 20 GB. llama.cpp is asked up to this context,
# where the tables take 48 MiB per cache (up to five for DeepSeek-V4's); a larger context is sized
# by the formula alone.
DRY_RUN_CELL_BYTES = 48
DRY_RUN_MAX_CTX = 1 << 20


class MeasureError(UserError):
    """llama.cpp could not load the model at all (not a refused setting: that is `refused`)."""


@dataclass(frozen=True)
class DryRunTotals:
    """What `dry_run_plan` reports: llama.cpp's own numbers for a plan, without loading weights."""

    kv_bytes: int
    compute_bytes: int
    output_bytes: int
    refused: str | None
    n_ctx: int
    seconds: float

    @property
    def context_bytes(self) -> int:
        """Everything besides the weights: the part of memory that depends on the settings."""
        return self.kv_bytes + self.compute_bytes + self.output_bytes


def ensure_backend(llama_cpp: Any) -> None:
    """Initialise llama.cpp's backends once per process (every load here and in graph.py needs it)."""
    global _backend_ready
    if not _backend_ready:
        llama_cpp.llama_backend_init()
        _backend_ready = True


@contextmanager
def captured_log(llama_cpp: Any) -> Iterator[tuple[list[str], list[str]]]:
    """Route llama.cpp's (process-global) log into two lists while held: all text, and errors.

    Callers hold `_lock` (LOG_LOCK); the previous callback is restored afterwards.
    """
    chunks: list[str] = []
    errors: list[str] = []
    last_level = _LOG_INFO

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]  # ctypes CFUNCTYPE, from a module loaded at run time
    def _capture(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        nonlocal last_level
        s = text.decode("utf-8", errors="replace")
        if level != _LOG_CONT:
            last_level = level
        chunks.append(s)
        if last_level == _LOG_ERROR:
            errors.append(s.strip())

    prev_cb = llama_cpp.llama_log_callback()
    prev_ud = ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(prev_cb), ctypes.byref(prev_ud))
    llama_cpp.llama_log_set(_capture, ctypes.c_void_p(0))
    try:
        yield chunks, errors
    finally:
        llama_cpp.llama_log_set(prev_cb, prev_ud)


def extra_buffers_allowed(path: str | os.PathLike[str], settings: Settings) -> bool:
    """Whether llama.cpp may repack this file's weights into ggml-cpu's extra buffers here: not where
    the plan says --no-repack, nor where the CPU code loaded in this process could not run them
    (placement.no_repack_reason). The second check guards loads whose settings were not planned on
    this machine (a saved profile's, a caller's own), since the failure aborts the whole process."""
    if settings.no_repack:
        return False
    from vrampilot.llamacpp import loaded_backends

    loaded = loaded_backends()
    if loaded is None or loaded.cpu_variant not in AMX_VARIANTS:
        return True  # the header is read only where the answer can be no
    try:
        st = os.stat(path)
    except OSError:
        return True  # llama.cpp refuses the file itself, with its own reason
    return _repackable(os.fspath(path), st.st_mtime_ns, st.st_size, loaded.cpu_variant)


@functools.lru_cache(maxsize=16)
def _repackable(path: str, _mtime_ns: int, _size: int, cpu_variant: str) -> bool:
    """The header read once per file version: a plan's dry runs load the same file many times."""
    from vrampilot.gguf import GGUFError, load_model_spec

    try:
        spec = load_model_spec(path)
    except GGUFError:
        return True  # llama.cpp refuses the file itself, with its own reason
    return no_repack_reason(spec, cpu_variant) is None


def load_model(
    llama_cpp: Any,
    p: Path,
    n_gpu_layers: int,
    dry_run: bool,
    errors: list[str],
    offload: Offload | None = None,
    overrides: CpuOverrides | None = None,
    mmap: bool = True,
    load_mtp: bool = False,
    extra_buffers: bool = True,
) -> Any:
    """Load a model as the engine would (its -ngl, devices, CPU overrides, repacking), or only its
    header with dry_run; the loading error llama.cpp logged becomes a MeasureError."""
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    mparams.use_extra_bufts = extra_buffers  # Settings.no_repack: as the engine and llama-server load it
    mparams.load_mtp = load_mtp  # the MTP block's weights, which only a drafting context uses
    if offload is not None:
        offload.apply(mparams)
    if overrides is not None:
        # The plan's CPU overrides, as the engine applies them: experts kept in host memory change
        # what each device's compute buffer holds (llama.cpp reads the array during this call).
        overrides.apply(mparams)
    if dry_run or not mmap:
        # With mmap the dry run aborts; a real load without it gets buffers of exactly the tensors
        # (a mapped buffer spans the file range between its first and last tensor).
        mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    if dry_run:
        mparams.no_alloc = True
    model = llama_cpp.llama_model_load_from_file(os.fsencode(p), mparams)
    if not model:
        reason = "; ".join(e for e in errors if e) or "no reason logged"
        raise MeasureError(f"{p}: llama.cpp cannot load this model: {reason}")
    return model


class Offload:
    """The devices and split a dry run offloads to, set on llama_model_params (kept alive here)."""

    def __init__(self, names: tuple[str, ...], split: tuple[float, ...]) -> None:
        from vrampilot.llamacpp import device_handle

        self.names, self.split = names, split
        self._devices = (ctypes.c_void_p * (len(names) + 1))(*[device_handle(n) for n in names], None)
        self._split = (ctypes.c_float * _MAX_DEVICES)(*split[:_MAX_DEVICES]) if split else None

    def apply(self, mparams: Any) -> None:
        mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if self._split is not None:
            mparams.tensor_split = self._split


_MAX_DEVICES = 16  # LLAMA_MAX_DEVICES: the length llama.cpp reads tensor_split with


def context_params(llama_cpp: Any, settings: Settings) -> Any:
    """llama_context_params for `settings`, set as the engine and llama-server set them."""
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = settings.n_ctx
    cparams.n_batch = settings.n_batch
    cparams.n_ubatch = settings.n_ubatch
    cparams.n_seq_max = max(1, settings.n_seq)
    cparams.n_outputs_max = settings.n_outputs_max  # as the engine and llama-server reserve
    cparams.n_threads = settings.n_threads
    cparams.n_threads_batch = settings.n_threads_batch
    cparams.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if settings.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    cparams.type_k = int(ggml_type(settings.type_k))
    cparams.type_v = int(ggml_type(settings.type_v))
    cparams.swa_full = settings.swa_full
    cparams.kv_unified = kv_unified(settings)
    # Rollback snapshots of recurrent / DeepSeek-V4 compressor state: llama-server asks for them only
    # when it drafts with MTP (kv.py counts them).
    cparams.n_rs_seq = settings.rollback_snapshots
    cparams.offload_kqv = True
    cparams.no_perf = True
    return cparams


def measure_allocations(
    path: str | os.PathLike[str],
    settings: Settings,
    *,
    dry_run: bool = True,
    mmap: bool = True,
) -> MeasuredBuffers:
    """Load `path` with llama.cpp on the CPU with `settings` and report what it allocates.

    `mmap=False` loads a real run without mapping the file (llama-server's --load-mode none).
    A context llama.cpp refuses (e.g. a quantized V cache without flash attention) is reported in
    `refused` with llama.cpp's reason; a model it cannot load raises MeasureError.
    """
    from vrampilot import llamacpp  # heavy import, and the planner must work without it

    llama_cpp = llamacpp.load()
    p = Path(path)
    if not p.is_file():
        raise MeasureError(f"{p}: file not found")
    if dry_run and settings.n_ctx > DRY_RUN_MAX_CTX:
        raise MeasureError(
            f"llama.cpp's dry run is asked for contexts of up to {DRY_RUN_MAX_CTX} tokens, not {settings.n_ctx}: "
            f"it allocates {DRY_RUN_CELL_BYTES} bytes a token for its cache's cells even without the weights"
        )

    with _lock:
        ensure_backend(llama_cpp)
        t0 = time.perf_counter()
        with captured_log(llama_cpp) as (chunks, errors):
            model = ctx = None
            refused: str | None = None
            drafting = settings.drafts_mtp
            draft_log: tuple[int, int] | None = None  # where the draft context's log starts and ends
            try:
                model = load_model(
                    llama_cpp,
                    p,
                    settings.n_gpu_layers,
                    dry_run,
                    errors,
                    None,
                    CpuOverrides(cpu_override_patterns(settings)),
                    mmap,
                    load_mtp=drafting,
                    extra_buffers=extra_buffers_allowed(p, settings),
                )
                n_errors_after_load = len(errors)
                ctx = llama_cpp.llama_init_from_model(model, context_params(llama_cpp, settings))
                if not ctx:
                    refused = refusal_reason(errors[n_errors_after_load:])
                elif drafting:
                    draft_log = _draft_context(llama_cpp, model, ctx, settings, chunks)
            finally:
                if ctx:
                    llama_cpp.llama_free(ctx)  # logs the exact compute size of a real allocation
                if model:
                    llama_cpp.llama_model_free(model)
        seconds = time.perf_counter() - t0

    if draft_log is None:
        return parse_buffers("".join(chunks).splitlines(), dry_run, refused, seconds)
    start, end = draft_log
    draft = parse_buffers("".join(chunks[start:end]).splitlines(), dry_run, None, 0.0)
    main = parse_buffers("".join(chunks[:start] + chunks[end:]).splitlines(), dry_run, refused, seconds)
    return replace(main, draft=draft)


def _draft_context(llama_cpp: Any, model: Any, target: Any, settings: Settings, chunks: list[str]) -> tuple[int, int]:
    """Create and free the MTP draft context llama-server drafts with (common/speculative.cpp:
    ctx_type MTP, the target's n_ctx, no rollback snapshots, the draft's cache types and one logit
    row per sequence: common_base_params_to_speculative); where its log lines are in `chunks`."""
    start = len(chunks)
    cparams = context_params(llama_cpp, settings.mtp_context())
    cparams.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
    cparams.n_ctx = llama_cpp.llama_n_ctx(target)
    cparams.n_rs_seq = 0
    draft = llama_cpp.llama_init_from_model(model, cparams)
    if not draft:
        raise MeasureError("llama.cpp could not create the MTP draft context")
    llama_cpp.llama_free(draft)
    return start, len(chunks)


def dry_run_plan(path: str | os.PathLike[str], settings: Settings) -> DryRunTotals:
    """llama.cpp's own numbers for a plan ("verify this plan with llama.cpp"), without the weights."""
    m = measure_allocations(path, settings, dry_run=True)
    return DryRunTotals(
        kv_bytes=m.kv_bytes,
        compute_bytes=m.compute_total,
        output_bytes=m.output_bytes,
        refused=m.refused,
        n_ctx=m.n_ctx,
        seconds=m.seconds,
    )
