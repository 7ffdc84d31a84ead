"""The dry runs the planner asks for while it plans: llama.cpp's compute buffers (and its cache and
output buffer) for one configuration, with the model's header kept loaded and the answers kept.

A plan asks for many configurations of one file, so this keeps what measure.py's one-off loads do
not: loaded headers and results per configuration. It never waits long for llama.cpp's log (a
model loading elsewhere holds it): the plan keeps its formula instead. RPC hosts are asked from a
child process, since ggml aborts the process that uses a host which goes away.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrampilot.llamacpp import LOG_LOCK, CpuOverrides
from vrampilot.planner.dry_run.log_lines import parse_buffers, refusal_reason
from vrampilot.planner.dry_run.measure import (
    DRY_RUN_MAX_CTX,
    MeasureError,
    Offload,
    captured_log,
    context_params,
    ensure_backend,
    extra_buffers_allowed,
    load_model,
)
from vrampilot.planner.memory.kv import kv_unified
from vrampilot.planner.memory.placement import cpu_override_patterns
from vrampilot.planner.settings import Settings

# A plan does not wait for a model load in progress (seconds): it falls back to the formula.
PLAN_WAIT_S = 1.0


@contextmanager
def _held(lock: threading.Lock) -> Iterator[None]:
    """Release a lock already acquired (with a timeout) when the block ends."""
    try:
        yield
    finally:
        lock.release()


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
    from vrampilot.llamacpp import register_rpc_server

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
    if not LOG_LOCK.acquire(timeout=PLAN_WAIT_S):
        return None
    try:
        with _held(LOG_LOCK):
            ensure_backend(llama_cpp)
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
            with captured_log(llama_cpp) as (chunks, errors):
                model = _headers.get(fkey)
                if model is None:
                    try:
                        devices = Offload(*offload) if offload is not None else None
                        model = load_model(
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
                ctx = llama_cpp.llama_init_from_model(model, context_params(llama_cpp, settings))
                refused = None if ctx else refusal_reason(errors[n_errors:])
                if ctx:
                    llama_cpp.llama_free(ctx)
                lines = "".join(chunks[start:]).splitlines()
            parsed = parse_buffers(lines, True, refused, time.perf_counter() - t0)
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
