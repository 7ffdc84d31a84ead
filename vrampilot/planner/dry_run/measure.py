"""Ask llama.cpp itself what a configuration allocates: the ground truth the planner is tested against.

llama.cpp logs every buffer it creates. We load the model with llama-cpp-python's low-level API on
the CPU, capture that log with `llama_log_set` (restoring the previous callback afterwards), and
parse the buffer lines:

    load_tensors:          CPU model buffer size =    92.10 MiB
    llama_context:        CPU  output buffer size =     0.19 MiB
    llama_kv_cache:        CPU KV buffer size =    90.00 MiB
    llama_kv_cache: size =   90.00 MiB (  4096 cells,  30 layers,  1/1 seqs), K (f16): 45.00 MiB, V (f16): 45.00 MiB
    sched_reserve:        CPU compute buffer size =    99.38 MiB
    ~llama_context:        CPU compute buffer size is  99.3828 MiB, matches expectation of ...  (debug, real runs)

Every number is printed in MiB with 2 decimals (4 for the debug line at teardown), so a parsed size
is exact to +-0.005 MiB (5243 bytes) per line; `matches_print` compares a byte prediction with a
printed value at that resolution.

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
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.llamacpp.buffer_log import COMPUTE_RE, KVBUF_RE, MODEL_RE, OUTPUT_RE, STATE_BUF_RE
from vrampilot.llamacpp.lock import LOG_LOCK
from vrampilot.llamacpp.overrides import CpuOverrides
from vrampilot.planner.memory.kv import ggml_type, kv_unified
from vrampilot.planner.memory.placement import AMX_VARIANTS, cpu_override_patterns, no_repack_reason
from vrampilot.planner.settings import Settings

MIB = 1024 * 1024
PRINT_RESOLUTION_BYTES = int(0.005 * MIB) + 1  # one unit in the last printed digit, halved, rounded up

# ggml_log_level (ggml.h)
_LOG_DEBUG, _LOG_INFO, _LOG_WARN, _LOG_ERROR, _LOG_CONT = 1, 2, 3, 4, 5

_MODEL_RE, _OUTPUT_RE, _KVBUF_RE, _COMPUTE_RE = MODEL_RE, OUTPUT_RE, KVBUF_RE, COMPUTE_RE
_KVSIZE_RE = re.compile(
    r"^llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/(\d+) seqs\), "
    r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB"
)
_STATE_RE = re.compile(
    r"^llama_dsv4_comp_state: (\w+) ratio = (\d+), state = (\d+) x (\d+), streams = (\d+), rs_seq = (\d+), "
    r"layers = (\d+), size =\s+([\d.]+) MiB"
)
_RS_RE = re.compile(r"^llama_memory_recurrent: size =\s+([\d.]+) MiB")
_COMPUTE_EXACT_RE = re.compile(r"^~llama_context:\s+(\S+) compute buffer size (?:is|of)\s+([\d.]+) MiB")
_CPARAM_RE = re.compile(r"^llama_context: (n_ctx|n_ctx_seq|n_ubatch|n_batch|n_seq_max)\s+=\s+(\d+)")
_ERROR_PREFIXES = ("llama_init_from_model: ", "llama_context: ")

# llama.cpp's log callback is process-global, and buffer sizes are only in its log: whoever parses
# it (these measurements, the engine's load errors) holds this lock while llama.cpp logs for them.
_lock = LOG_LOCK
# A plan does not wait for a model load in progress (seconds): it falls back to the formula.
PLAN_WAIT_S = 1.0
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
class KvLine:
    """One `llama_kv_cache: size = ...` line (sliding-window models print two)."""

    size_mib: float
    cells: int
    layers: int
    n_seq: int
    n_stream: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float

    @property
    def size_bytes(self) -> int:
        return round(self.size_mib * MIB)

    @property
    def k_bytes(self) -> int:
        return round(self.k_mib * MIB)

    @property
    def v_bytes(self) -> int:
        return round(self.v_mib * MIB)


@dataclass(frozen=True)
class StateLine:
    """One DeepSeek-V4 compressor-state line: `csa ratio = 4, state = 8 x 1024, streams = 1, ...`."""

    name: str  # csa, hca, lid
    ratio: int
    rows: int
    width: int
    n_stream: int
    rs_seq: int
    layers: int
    size_mib: float

    @property
    def size_bytes(self) -> int:
        return round(self.size_mib * MIB)


@dataclass(frozen=True)
class MeasuredBuffers:
    model_bytes: dict[str, int]  # per buffer name (CPU, CPU_Mapped, CPU_REPACK, ...); 0 in a dry run
    kv_bytes: int  # sum of the KV `size =` lines (+ recurrent state), at print resolution
    kv_lines: list[KvLine]
    compute_bytes: dict[str, int]  # per device buffer (CPU on this build)
    output_bytes: int
    refused: str | None  # llama.cpp's reason when it refused the context, else None
    kv_buffer_bytes: dict[str, int] = field(default_factory=dict)  # real runs only
    recurrent_bytes: int = 0
    state_lines: list[StateLine] = field(default_factory=list)  # DeepSeek-V4 compressor states (in kv_bytes)
    n_ctx: int = 0  # as llama.cpp settled them
    n_ctx_seq: int = 0
    n_ubatch: int = 0
    dry_run: bool = True
    compute_resolution_bytes: int = PRINT_RESOLUTION_BYTES
    seconds: float = 0.0
    log: tuple[str, ...] = field(default=(), repr=False)
    # The MTP draft context's own buffers, when the settings draft with MTP (spec_type "mtp")
    draft: MeasuredBuffers | None = None

    @property
    def compute_total(self) -> int:
        return sum(self.compute_bytes.values())

    @property
    def total_bytes(self) -> int:
        """Model + KV + compute + output, as llama.cpp reports them."""
        return sum(self.model_bytes.values()) + self.kv_bytes + self.compute_total + self.output_bytes


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


def matches_print(predicted_bytes: int, printed_bytes: int, decimals: int = 2) -> bool:
    """True when llama.cpp's `%.{decimals}f MiB` print of `predicted_bytes` could read `printed_bytes`."""
    tolerance = 0.5 * 10.0 ** (-decimals) * MIB
    # llama.cpp divides in float (KV lines cast to float32): allow its relative rounding as well
    return abs(predicted_bytes - printed_bytes) <= tolerance + 1e-6 * max(predicted_bytes, 1) + 1


def _mib(text: str) -> int:
    return round(float(text) * MIB)


def _ensure_backend(llama_cpp: Any) -> None:
    global _backend_ready
    if not _backend_ready:
        llama_cpp.llama_backend_init()
        _backend_ready = True


def _parse(lines: list[str], dry_run: bool, refused: str | None, seconds: float) -> MeasuredBuffers:
    model: dict[str, int] = {}
    kv_buf: dict[str, int] = {}
    compute: dict[str, int] = {}
    compute_exact: dict[str, int] = {}
    kv_lines: list[KvLine] = []
    states: list[StateLine] = []
    cparams: dict[str, int] = {}
    output = recurrent = 0
    for line in lines:
        if m := _MODEL_RE.match(line):
            model[m[1]] = model.get(m[1], 0) + _mib(m[2])
        elif m := _OUTPUT_RE.match(line):
            output += _mib(m[2])
        elif m := (_KVBUF_RE.match(line) or STATE_BUF_RE.match(line)):
            kv_buf[m[1]] = kv_buf.get(m[1], 0) + _mib(m[2])
        elif m := _STATE_RE.match(line):
            ratio, rows, width, n_stream, rs_seq, layers = (int(m[i]) for i in range(2, 8))
            states.append(StateLine(m[1], ratio, rows, width, n_stream, rs_seq, layers, float(m[8])))
        elif m := _KVSIZE_RE.match(line):
            kv_lines.append(
                KvLine(float(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6], float(m[7]), m[8], float(m[9]))
            )
        elif m := _RS_RE.match(line):
            recurrent += _mib(m[1])
        elif m := _COMPUTE_RE.match(line):
            compute[m[1]] = _mib(m[2])
        elif m := _COMPUTE_EXACT_RE.match(line):
            compute_exact[m[1]] = round(float(m[2]) * MIB)
        elif m := _CPARAM_RE.match(line):
            cparams[m[1]] = int(m[2])
    resolution = PRINT_RESOLUTION_BYTES
    if compute_exact and set(compute_exact) >= set(compute):
        compute = compute_exact
        resolution = int(0.00005 * MIB) + 1
    kv_total = round(sum(k.size_mib for k in kv_lines) * MIB) + recurrent + sum(s.size_bytes for s in states)
    return MeasuredBuffers(
        model_bytes=model,
        kv_bytes=kv_total,
        kv_lines=kv_lines,
        compute_bytes=compute,
        output_bytes=output,
        refused=refused,
        kv_buffer_bytes=kv_buf,
        recurrent_bytes=recurrent,
        state_lines=states,
        n_ctx=cparams.get("n_ctx", 0),
        n_ctx_seq=cparams.get("n_ctx_seq", 0),
        n_ubatch=cparams.get("n_ubatch", 0),
        dry_run=dry_run,
        compute_resolution_bytes=resolution,
        seconds=seconds,
        log=tuple(lines),
    )


def _refusal(errors: list[str]) -> str:
    for text in errors:
        for prefix in _ERROR_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                break
        text = text.removeprefix("failed to initialize the context: ")
        if text:
            return text
    return "llama.cpp refused to create the context (no reason logged)"


@contextmanager
def _held(lock: threading.Lock) -> Iterator[None]:
    """Release a lock already acquired (with a timeout) when the block ends."""
    try:
        yield
    finally:
        lock.release()


@contextmanager
def _captured_log(llama_cpp: Any) -> Iterator[tuple[list[str], list[str]]]:
    """Route llama.cpp's (process-global) log into two lists while held: all text, and errors.

    Callers hold `_lock`; the previous callback is restored afterwards.
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
    from vrampilot.llamacpp.backends import loaded_backends

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


def _load_model(
    llama_cpp: Any,
    p: Path,
    n_gpu_layers: int,
    dry_run: bool,
    errors: list[str],
    offload: _Offload | None = None,
    overrides: CpuOverrides | None = None,
    mmap: bool = True,
    load_mtp: bool = False,
    extra_buffers: bool = True,
) -> Any:
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


class _Offload:
    """The devices and split a dry run offloads to, set on llama_model_params (kept alive here)."""

    def __init__(self, names: tuple[str, ...], split: tuple[float, ...]) -> None:
        from vrampilot.llamacpp.devices import device_handle

        self.names, self.split = names, split
        self._devices = (ctypes.c_void_p * (len(names) + 1))(*[device_handle(n) for n in names], None)
        self._split = (ctypes.c_float * _MAX_DEVICES)(*split[:_MAX_DEVICES]) if split else None

    def apply(self, mparams: Any) -> None:
        mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if self._split is not None:
            mparams.tensor_split = self._split


_MAX_DEVICES = 16  # LLAMA_MAX_DEVICES: the length llama.cpp reads tensor_split with


def _context_params(llama_cpp: Any, settings: Settings) -> Any:
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
        _ensure_backend(llama_cpp)
        t0 = time.perf_counter()
        with _captured_log(llama_cpp) as (chunks, errors):
            model = ctx = None
            refused: str | None = None
            drafting = settings.drafts_mtp
            draft_log: tuple[int, int] | None = None  # where the draft context's log starts and ends
            try:
                model = _load_model(
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
                ctx = llama_cpp.llama_init_from_model(model, _context_params(llama_cpp, settings))
                if not ctx:
                    refused = _refusal(errors[n_errors_after_load:])
                elif drafting:
                    draft_log = _draft_context(llama_cpp, model, ctx, settings, chunks)
            finally:
                if ctx:
                    llama_cpp.llama_free(ctx)  # logs the exact compute size of a real allocation
                if model:
                    llama_cpp.llama_model_free(model)
        seconds = time.perf_counter() - t0

    if draft_log is None:
        return _parse("".join(chunks).splitlines(), dry_run, refused, seconds)
    start, end = draft_log
    draft = _parse("".join(chunks[start:end]).splitlines(), dry_run, None, 0.0)
    main = _parse("".join(chunks[:start] + chunks[end:]).splitlines(), dry_run, refused, seconds)
    return replace(main, draft=draft)


def _draft_context(llama_cpp: Any, model: Any, target: Any, settings: Settings, chunks: list[str]) -> tuple[int, int]:
    """Create and free the MTP draft context llama-server drafts with (common/speculative.cpp:
    ctx_type MTP, the target's n_ctx, no rollback snapshots, the draft's cache types and one logit
    row per sequence: common_base_params_to_speculative); where its log lines are in `chunks`."""
    start = len(chunks)
    cparams = _context_params(llama_cpp, settings.mtp_context())
    cparams.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
    cparams.n_ctx = llama_cpp.llama_n_ctx(target)
    cparams.n_rs_seq = 0
    draft = llama_cpp.llama_init_from_model(model, cparams)
    if not draft:
        raise MeasureError("llama.cpp could not create the MTP draft context")
    llama_cpp.llama_free(draft)
    return start, len(chunks)


# Dry runs the planner asks for while it plans. Loading a header costs 1-500 ms (llama.cpp builds
# the vocabulary); creating a no_alloc context on a loaded header costs 1-25 ms. So headers stay
# loaded (a few, least recently used first out) and results are remembered per configuration.
_HEADERS_KEPT = 2
_RESULTS_KEPT = 512
_headers: OrderedDict[tuple[object, ...], Any] = OrderedDict()
_unloadable: dict[tuple[object, ...], str] = {}
_results: OrderedDict[tuple[object, ...], GraphCompute] = OrderedDict()


@dataclass(frozen=True)
class GraphCompute:
    """llama.cpp's compute buffers for one configuration, from a dry run on the build at hand."""

    compute_bytes: dict[str, int]  # per buffer (CPU on a CPU build; CUDA0, CUDA_Host, ... on others)
    refused: str | None
    seconds: float
    # The same dry run's cache and output buffer, at print resolution (planner/families.py routes
    # the architectures whose cache the formula is not verified on to these numbers).
    kv_bytes: int = 0
    kv_lines: int = 0  # printed lines kv_bytes sums (each exact to PRINT_RESOLUTION_BYTES)
    output_bytes: int = 0
    # kv_bytes as the log splits it: K and V over its caches, and recurrent or compressor states
    k_bytes: int = 0
    v_bytes: int = 0
    state_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(self.compute_bytes.values())


def _file_key(p: Path, n_gpu_layers: int, offloaded: bool, patterns: tuple[str, ...]) -> tuple[object, ...]:
    st = p.stat()
    # Measured on the CPU every layer stays there whatever -ngl says (and a CPU override moves
    # nothing): one header serves all. Offloaded, the overrides are the model's, as -ngl is.
    return (
        str(p.resolve()),
        st.st_size,
        st.st_mtime_ns,
        n_gpu_layers if offloaded else 0,
        patterns if offloaded else (),
    )


def _graph_compute_in_child(
    path: str | os.PathLike[str], settings: Settings, devices: tuple[str, ...]
) -> GraphCompute | None:
    """graph_compute with the RPC hosts registered, in a spawned process: a host that goes away
    (or a protocol mismatch) aborts that process only, and the plan keeps its formula."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(str(path), settings, devices, send), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(CHILD_TIMEOUT_S):
            return None
        result = receive.recv()
    except (EOFError, OSError):
        return None  # the child died: llama.cpp aborted (an RPC host went away)
    finally:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
    return result if isinstance(result, GraphCompute) else None


CHILD_TIMEOUT_S = 60.0


def _child_main(path: str, settings: Settings, devices: tuple[str, ...], send: Any) -> None:
    from vrampilot.llamacpp.devices import register_rpc_server

    for endpoint in settings.rpc_servers:
        register_rpc_server(endpoint)
    send.send(_graph_compute(path, settings, _offload_key(devices, settings)))
    send.close()


def graph_compute(
    path: str | os.PathLike[str], settings: Settings, devices: tuple[str, ...] | None = None
) -> GraphCompute | None:
    """llama.cpp's own compute-buffer sizes for `settings`, or None when it cannot be asked.

    devices None: the whole graph on the CPU (one buffer, what a CPU build reserves, and the
    graph a plan for devices this machine lacks will have). Else llama.cpp offloads to these
    devices (llama-server's names) with the settings' -ngl and split, and reports each one's
    buffer and the host's. RPC hosts are registered in a child process, since ggml aborts the
    process that uses a host which goes away.

    None means: llama-cpp-python is not installed, the file is gone, this llama.cpp cannot load
    the file (an architecture newer than the build), or a device cannot be reached. The planner
    then keeps its formula.
    """
    if devices is None:
        return _graph_compute(path, settings.with_(n_gpu_layers=0, tensor_split=(), devices=(), rpc_servers=()), None)
    if settings.uses_rpc:
        return _graph_compute_in_child(path, settings, devices)
    return _graph_compute(path, settings, _offload_key(devices, settings))


def _offload_key(devices: tuple[str, ...], settings: Settings) -> tuple[tuple[str, ...], tuple[float, ...]]:
    return devices, settings.tensor_split


def _graph_compute(
    path: str | os.PathLike[str], settings: Settings, offload: tuple[tuple[str, ...], tuple[float, ...]] | None
) -> GraphCompute | None:
    if settings.n_ctx > DRY_RUN_MAX_CTX:
        return None  # the formula: the dry run's cell tables grow with the context
    try:
        from vrampilot import llamacpp

        llama_cpp = llamacpp.load()
    except ImportError:
        return None
    p = Path(path)
    if not p.is_file():
        return None
    if not _lock.acquire(timeout=PLAN_WAIT_S):
        return None
    try:
        with _held(_lock):
            _ensure_backend(llama_cpp)
            patterns = cpu_override_patterns(settings)
            extra_buffers = extra_buffers_allowed(p, settings)
            fkey = (*_file_key(p, settings.n_gpu_layers, offload is not None, patterns), offload, extra_buffers)
            rkey = (
                fkey,
                settings.n_ctx,
                settings.n_ubatch,
                settings.n_seq,
                kv_unified(settings),
                settings.flash_attn,
                settings.type_k,
                settings.type_v,
                settings.swa_full,
                settings.n_outputs_max,  # the logit rows reserved (more with speculative decoding)
            )
            if rkey in _results:
                _results.move_to_end(rkey)
                return _results[rkey]
            if fkey in _unloadable:
                return None
            t0 = time.perf_counter()
            with _captured_log(llama_cpp) as (chunks, errors):
                model = _headers.get(fkey)
                if model is None:
                    try:
                        devices = _Offload(*offload) if offload is not None else None
                        model = _load_model(
                            llama_cpp,
                            p,
                            settings.n_gpu_layers if offload else 0,
                            True,
                            errors,
                            devices,
                            CpuOverrides(patterns) if offload else None,
                            extra_buffers=extra_buffers,
                        )
                    except (MeasureError, KeyError) as exc:
                        _unloadable[fkey] = str(exc)
                        return None
                    _headers[fkey] = model
                    while len(_headers) > _HEADERS_KEPT:
                        llama_cpp.llama_model_free(_headers.popitem(last=False)[1])
                _headers.move_to_end(fkey)
                n_errors = len(errors)
                start = len(chunks)
                ctx = llama_cpp.llama_init_from_model(model, _context_params(llama_cpp, settings))
                refused = None if ctx else _refusal(errors[n_errors:])
                if ctx:
                    llama_cpp.llama_free(ctx)
                lines = "".join(chunks[start:]).splitlines()
            parsed = _parse(lines, True, refused, time.perf_counter() - t0)
            result = GraphCompute(
                dict(parsed.compute_bytes),
                refused,
                parsed.seconds,
                kv_bytes=parsed.kv_bytes,
                kv_lines=len(parsed.kv_lines) + len(parsed.state_lines) + (1 if parsed.recurrent_bytes else 0),
                output_bytes=parsed.output_bytes,
                k_bytes=sum(line.k_bytes for line in parsed.kv_lines),
                v_bytes=sum(line.v_bytes for line in parsed.kv_lines),
                state_bytes=parsed.recurrent_bytes + sum(st.size_bytes for st in parsed.state_lines),
            )
            _results[rkey] = result
            while len(_results) > _RESULTS_KEPT:
                _results.popitem(last=False)
            return result
    except OSError:
        return None


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
