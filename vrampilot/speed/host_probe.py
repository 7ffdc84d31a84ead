"""The speed probe: a few seconds of llama.cpp on this CPU (its kernels, then the built-in model), once per machine.

What it times, each with 1 thread and with one per physical core (`probe_threads`):
- RAM read bandwidth: numpy summing a buffer larger than the last-level cache, split over threads.
- Per weight type, llama.cpp's mat-vec kernel over a matrix larger than the cache (what every
  decoded token does with every weight: the figure is weight bytes per second, so it already holds
  whichever of memory and arithmetic is the limit for that type), and its mat-mat kernel over a
  prompt-sized batch (what reading a prompt does: FLOPs per second). Weights sit where llama.cpp
  puts them, so repacked types (Q4_0, Q4_K on x86) are timed repacked.
- Flash attention per KV cache type and head size, one query over a long cache and a batch of
  queries; for f16 also over a cache larger than the CPU's caches (a model's whole cache is).
- The fixed costs of a decode step: a tiny Llama model (speed/probe_model.py) decoded through the
  engine's own loop at two depths and two vocabulary sizes gives the cost per step, per layer
  (its graph nodes and their barriers) and per logit sampled.
- The built-in model run for real (speed/reference_run.py): what a whole graph costs beyond the
  sum of its kernels, which the planner learns from (planner/speed_model/graph_factors.py).

The planner's speed model turns these into tokens/s (planner/speed_model/cpu_speed.py); replies then correct
what the model still misses (planner/calibration.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from vrampilot.speed import cpu_load
from vrampilot.speed.measured import (
    CHAIN_MATRIX_ROWS,
    LONG_ROW,
    SHORT_ROW,
    SHORTEST_ROW,
    AttentionRates,
    ElementwiseRates,
    HostProbe,
    KernelRates,
    RateAt,
    StepTiming,
)
from vrampilot.speed.probe_model import write_probe_model
from vrampilot.speed.reference_run import PREFILL_UBATCHES, READINGS, ReferenceSession, decode_step_times

if TYPE_CHECKING:
    from vrampilot.llamacpp import CpuKernels, OpTiming

_log = logging.getLogger("vrampilot.speed.host_probe")

# Weight types measured at first start: those of Q4_0, Q4_K_M, Q6_K, Q8_0 and F16 files. The types
# of a model being planned are measured when first needed (`measure_kernels`: two passes, seconds
# per type); `vrampilot doctor --measure` measures all of ALL_WEIGHT_TYPES.
CORE_WEIGHT_TYPES = ("q4_0", "q8_0", "q4_k", "q6_k", "f16")
# The weight types of released GGUF files (legacy, K-quants, IQ4, MXFP4, floats). A type not
# measured is predicted from the measured one nearest in bits per weight, and the plan says so.
ALL_WEIGHT_TYPES = (
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "q8_0",
    "q2_k",
    "q3_k",
    "q4_k",
    "q5_k",
    "q6_k",
    "iq4_nl",
    "iq4_xs",
    "mxfp4",
    "f16",
    "bf16",
    "f32",
)
# The KV cache types the planner chooses between (planner/plan.py PREFERRED_KV).
PROBE_KV_TYPES = ("f16", "q8_0", "q4_0")

# Larger than any last-level cache up to 32 MiB twice over, so mat-vec reads come from RAM as a real
# model's weights do; `stream_bytes` grows it on CPUs with more cache.
_MIN_STREAM_BYTES = 48 << 20
# Prompt-sized product: 1024 x 1024 weights times 128 tokens (0.27 GFLOP, a few ms per run); the
# mixture-of-experts one spreads 128 tokens over 8 experts of 1024 x 512, 2 per token (32 each, as
# Qwen3-30B-A3B's 128 experts share a 512-token ubatch 8 per token).
_MATMUL_K, _MATMUL_N, _MATMUL_M = 1024, 1024, 128
_MOE_N, _MOE_EXPERTS = 512, (8, 2)
# The most matrices in a mat-vec chain (a graph holds 2048 nodes; 400 small ones are 59 MB of Q4_0).
_CHAIN_MOST = 400
# Attention: 8 heads of 64 and of 256 (the range of released models), a 4096-cell cache of heads of
# 64 for one decoding query (fewer cells for larger heads: the same bytes), a 128-query batch (the
# tiled kernel needs 64 or more) over 1024 cells. Quantized caches run a slower kernel, so they get
# smaller shapes that keep the kernels' part of the probe near a second.
_ATTN_HEADS, _ATTN_HEAD_DIMS = 8, (64, 256)
_ATTN_SHAPES = {"f16": ((4096,), (128, 1024)), "q8_0": ((1024,), (16, 512)), "q4_0": ((1024,), (16, 512))}
_PACE_TYPE, _PACE_ROW, _PACE_REPEATS = "q8_0", 4096, 3
# Elementwise steps: (op, f32 elements per token) over 128 tokens, a fraction of a millisecond each.
_ELEMENTWISE_SHAPES = (("norm", 1024), ("swiglu", 2048), ("geglu", 2048), ("rope", 1024))
_ELEMENTWISE_ROWS = 128
# llama.cpp's decoding kernel splits the cache over the threads from this many cells on.
_SPLIT_KV_CELLS = 512
# The tiny model's steps: 2 and 12 layers at 256 logits, 2 layers at 32768 logits (speed/probe_model.py).
_STEP_SHAPES = ((2, 256), (12, 256), (2, 32768))
_STEP_TOKENS = 24
# Kernels and attention are timed in two passes some seconds apart (a reading of the built-in
# model's run between them, another after), each figure keeping its faster pass: a machine's speed
# can move within a minute, and one slow moment in a single pass carries into every prediction,
# through the built-in model's graph factors too (docs/speed-model.md, decision log, "The
# built-in model's run: readings, warm-up, layout").
KERNEL_PASSES = 2

ProgressFn = Callable[[str], None]


class ProbeCancelled(Exception):
    pass


def probe_threads(physical_cores: int) -> tuple[int, ...]:
    """1 and one per physical core: llama.cpp's defaults and the two ends of its scaling."""
    return tuple(sorted({1, max(1, physical_cores)}))


def ggml_type_id(type_name: str) -> int:
    """ggml's enum value of `type_name` ("q4_k", "f16", ...)."""
    return int(GGMLQuantizationType[type_name.upper()].value)


def bits_per_weight(type_name: str) -> float:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    return 8.0 * size / block


def last_level_cache_bytes() -> int | None:
    """Size of the last-level cache (Linux sysfs); None elsewhere."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    best = None
    with contextlib.suppress(OSError, ValueError):
        for index in base.glob("index*"):
            text = (index / "size").read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            value = int(text.rstrip("KMG")) * mult
            best = max(best or 0, value)
    return best


def stream_bytes() -> int:
    """Bytes a probe streams so its reads come from RAM: at least 1.5x the last-level cache."""
    llc = last_level_cache_bytes() or 0
    return max(_MIN_STREAM_BYTES, int(1.5 * llc))


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def measure_ram_read_gbps(threads: Sequence[int], n_bytes: int, repeats: int = 3) -> list[RateAt]:
    """numpy summing `n_bytes`, split into one slice per thread (numpy releases the GIL)."""
    a = np.ones(n_bytes // 8, dtype=np.float64)
    out = []
    for t in threads:
        parts = np.array_split(a, t)
        best = float("inf")
        with ThreadPoolExecutor(t) as pool:
            for _ in range(repeats + 1):  # the first pass warms the pool and the TLB
                t0 = time.perf_counter()
                list(pool.map(np.sum, parts))
                best = min(best, time.perf_counter() - t0)
        out.append(RateAt(t, round(a.nbytes / best / 1e9, 4)))
    return out


def _rates(threads: Sequence[int], work: float, timings: Sequence[OpTiming], unit: float) -> tuple[RateAt, ...]:
    # Rounded as stored, so a probe read back from the record equals the one measured.
    return tuple(RateAt(t, round(work / x.seconds / unit, 4)) for t, x in zip(threads, timings, strict=True))


def _kernel_rates(cpu: CpuKernels, name: str, threads: Sequence[int], stream: int) -> KernelRates | None:
    tid = ggml_type_id(name)
    if not cpu.can_quantize(tid):
        return None
    decode: list[tuple[RateAt, ...]] = []
    buffer = "CPU"
    for row in (LONG_ROW, SHORT_ROW, SHORTEST_ROW):
        k = max(row, cpu.block_size(tid))
        n = max(64, stream // cpu.row_bytes(tid, k) // 64 * 64)  # repacked kernels take rows by 8 or 16
        vec = cpu.mul_mat(tid, k, n, 1, threads, repeats=2)
        buffer = vec[0].buffer
        decode.append(_rates(threads, cpu.row_bytes(tid, k) * n, vec, 1e9))
    # A decode step's chain of small mat-vecs: what each costs beyond its bytes at the SHORT_ROW rate.
    k = max(SHORT_ROW, cpu.block_size(tid))
    one = cpu.row_bytes(tid, k) * CHAIN_MATRIX_ROWS
    count = max(8, min(_CHAIN_MOST, stream // one))
    chain = cpu.mul_vec_chain(tid, k, CHAIN_MATRIX_ROWS, count, threads, repeats=3)
    overhead = tuple(
        RateAt(t, round(max(0.0, (x.seconds / count - one / (r.value * 1e9)) * 1e6), 4))
        for t, x, r in zip(threads, chain, decode[1], strict=True)
    )
    k, n, m = _MATMUL_K, _MATMUL_N, _MATMUL_M
    mat = cpu.mul_mat(tid, k, n, m, threads, repeats=3)
    n_used = _MOE_EXPERTS[1]
    moe = cpu.mul_mat(tid, k, _MOE_N, m, threads, repeats=3, experts=_MOE_EXPERTS)
    return KernelRates(
        type_name=name,
        buffer=buffer,
        decode_gbps=decode[0],
        decode_short_gbps=decode[1],
        prefill_gflops=_rates(threads, 2.0 * k * n * m, mat, 1e9),
        prefill_moe_gflops=_rates(threads, 2.0 * k * _MOE_N * m * n_used, moe, 1e9),
        decode_shortest_gbps=decode[2],
        matvec_overhead_us=overhead,
    )


def _pick(a: tuple[RateAt, ...], b: tuple[RateAt, ...], best: Callable[[float, float], float]) -> tuple[RateAt, ...]:
    """Per thread count, `best` of two passes' figures (a count only `a` measured stays)."""
    other = {r.threads: r.value for r in b}
    return tuple(RateAt(r.threads, best(r.value, other.get(r.threads, r.value))) for r in a)


def _faster(a: tuple[RateAt, ...], b: tuple[RateAt, ...]) -> tuple[RateAt, ...]:
    """The faster pass of rates (the larger figure)."""
    return _pick(a, b, max)


def _smaller(a: tuple[RateAt, ...], b: tuple[RateAt, ...]) -> tuple[RateAt, ...]:
    """The faster pass of times (the smaller figure)."""
    return _pick(a, b, min)


def faster_kernels(a: Sequence[KernelRates], b: Sequence[KernelRates]) -> list[KernelRates]:
    """Per type and figure, the faster of two passes (a type only one pass measured stays)."""
    second = {k.type_name: k for k in b}
    out = []
    for k in a:
        o = second.get(k.type_name)
        out.append(
            k
            if o is None
            else replace(
                k,
                decode_gbps=_faster(k.decode_gbps, o.decode_gbps),
                decode_short_gbps=_faster(k.decode_short_gbps, o.decode_short_gbps),
                decode_shortest_gbps=_faster(k.decode_shortest_gbps, o.decode_shortest_gbps),
                prefill_gflops=_faster(k.prefill_gflops, o.prefill_gflops),
                prefill_moe_gflops=_faster(k.prefill_moe_gflops, o.prefill_moe_gflops),
                matvec_overhead_us=_smaller(k.matvec_overhead_us, o.matvec_overhead_us),
            )
        )
    return out


def faster_attention(a: Sequence[AttentionRates], b: Sequence[AttentionRates]) -> list[AttentionRates]:
    """Per KV type, head size and figure, the faster of two passes."""
    second = {(x.kv_type, x.head_dim): x for x in b}
    out = []
    for x in a:
        o = second.get((x.kv_type, x.head_dim))
        out.append(
            x
            if o is None
            else replace(
                x,
                decode_gflops=_faster(x.decode_gflops, o.decode_gflops),
                prefill_gflops=_faster(x.prefill_gflops, o.prefill_gflops),
                decode_ram_gflops=_faster(x.decode_ram_gflops, o.decode_ram_gflops),
            )
        )
    return out


def pace_ms_with(cpu: CpuKernels, threads: int) -> float:
    """The pace gauge (speed/pace.py): milliseconds for a q8_0 product shaped like a prompt's
    ubatch and a q8_0 mat-vec over more bytes than the last-level cache, each the best of three runs
    at `threads` (q8_0 runs the same generic code on every CPU variant, no repacking)."""
    tid = ggml_type_id(_PACE_TYPE)
    product = cpu.mul_mat(tid, _MATMUL_K, _MATMUL_N, _MATMUL_M, [threads], repeats=_PACE_REPEATS)[0].seconds
    rows = max(64, stream_bytes() // cpu.row_bytes(tid, _PACE_ROW) // 64 * 64)
    stream = cpu.mul_mat(tid, _PACE_ROW, rows, 1, [threads], repeats=_PACE_REPEATS)[0].seconds
    return round((product + stream) * 1e3, 4)


def _elementwise_rates(cpu: CpuKernels, threads: Sequence[int]) -> list[ElementwiseRates]:
    out = []
    for op, width in _ELEMENTWISE_SHAPES:
        timings = cpu.elementwise(op, width, _ELEMENTWISE_ROWS, threads, repeats=3)
        n = width * _ELEMENTWISE_ROWS
        out.append(
            ElementwiseRates(
                op, tuple(RateAt(t, round(x.seconds / n * 1e9, 4)) for t, x in zip(threads, timings, strict=True))
            )
        )
    return out


def faster_elementwise(a: Sequence[ElementwiseRates], b: Sequence[ElementwiseRates]) -> list[ElementwiseRates]:
    """Per step, the faster (fewer nanoseconds) of two passes."""
    second = {x.op: x for x in b}
    out = []
    for x in a:
        o = second.get(x.op)
        if o is None:
            out.append(x)
            continue
        out.append(replace(x, ns_per_element=_smaller(x.ns_per_element, o.ns_per_element)))
    return out


def _attention_rates(cpu: CpuKernels, kv: str, threads: Sequence[int], stream: int) -> list[AttentionRates]:
    tid = ggml_type_id(kv)
    (n_kv_dec,), (n_q, n_kv_pre) = _ATTN_SHAPES.get(kv, _ATTN_SHAPES["q8_0"])
    h = _ATTN_HEADS
    out = []
    for d in _ATTN_HEAD_DIMS:
        # The same bytes at every head size, so that the cache stays in the CPU's caches (8 MiB of
        # f16 at 4096 cells of 64): a larger head over as many cells would time RAM instead.
        n_cached = max(_SPLIT_KV_CELLS, n_kv_dec * _ATTN_HEAD_DIMS[0] // d)
        dec = cpu.flash_attn(tid, d, 1, n_cached, h, threads, repeats=2)
        pre = cpu.flash_attn(tid, d, n_q, n_kv_pre, h, threads, repeats=2)
        ram: tuple[RateAt, ...] = ()
        if kv == "f16":
            # A whole model's cache is read from RAM at every step, not from the CPU's caches:
            # the same query over a cache larger than them shows what streaming it costs.
            n_big = max(n_cached, stream // (h * d * 2 * 2) // 256 * 256)
            ram = _rates(threads, 4.0 * h * d * n_big, cpu.flash_attn(tid, d, 1, n_big, h, threads, repeats=2), 1e9)
        # 2 FLOPs per multiply-add, for Q.K and for the weighted sum of V.
        out.append(
            AttentionRates(
                kv_type=kv,
                head_dim=d,
                decode_gflops=_rates(threads, 4.0 * h * d * n_cached, dec, 1e9),
                prefill_gflops=_rates(threads, 4.0 * h * d * n_kv_pre * n_q, pre, 1e9),
                decode_ram_gflops=ram,
            )
        )
    return out


def measure_steps(threads: Sequence[int]) -> tuple[StepTiming, ...]:
    """Decode steps of the tiny model at each shape and thread count, through the loop the engine
    runs per token (llama-cpp-python's generate: sample, then decode). Detokenizing, a few
    microseconds, is left out: llama.cpp has no text for the placeholder vocabulary."""
    import tempfile

    from vrampilot.llamacpp import LOG_LOCK, load

    llama_cpp = load()
    out = []
    with tempfile.TemporaryDirectory(prefix="vrampilot-probe-") as tmp:
        for n_layer, n_vocab in _STEP_SHAPES:
            path = write_probe_model(Path(tmp) / f"probe-{n_layer}-{n_vocab}.gguf", n_layer, n_vocab)
            with LOG_LOCK:  # loading logs; the planner's dry runs read that log
                llm = llama_cpp.Llama(
                    str(path),
                    n_ctx=512,
                    n_batch=512,
                    n_ubatch=512,
                    n_threads=1,
                    n_threads_batch=1,
                    flash_attn=True,
                    verbose=False,
                    n_gpu_layers=0,
                    op_offload=False,
                )  # the CPU's steps, as the reference run
            try:
                rates = []
                for t in threads:
                    llama_cpp.llama_set_n_threads(llm.ctx, t, t)
                    times: list[float] = []
                    for _ in range(2):
                        llm.reset()
                        times += decode_step_times(llm, [1, 2, 3], _STEP_TOKENS)
                    # The lower quartile of single steps: a step another program preempted (all
                    # threads wait for the one descheduled) says nothing about this machine.
                    times.sort()
                    rates.append(RateAt(t, round(times[len(times) // 4] * 1e6, 3)))
                out.append(StepTiming(n_layer, n_vocab, tuple(rates)))
            finally:
                llm.close()
    return tuple(out)


def measure_host(
    physical_cores: int,
    cpu_variant: str | None = None,
    *,
    weight_types: Sequence[str] = CORE_WEIGHT_TYPES,
    kv_types: Sequence[str] = PROBE_KV_TYPES,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
    reference: bool = True,
) -> HostProbe:
    """Run the probe (under a minute at a quiet moment: the RAM read, two passes of the kernels and
    the built-in model's run, which `reference` = False leaves out; docs/speed-model.md says what
    each part measures). Raises GgmlError when llama.cpp cannot run it,
    ProbeCancelled when `cancel` is set between two measurements."""
    from vrampilot.llamacpp import CpuKernels
    from vrampilot.paths import embedded_model_path

    threads = probe_threads(physical_cores)
    t_start = time.perf_counter()
    load_start = cpu_load.snapshot()

    def cancelled() -> None:
        if cancel is not None and cancel.is_set():
            raise ProbeCancelled

    def step(what: str) -> None:
        cancelled()
        if progress is not None:
            progress(what)

    stream = stream_bytes()
    step("RAM bandwidth")
    ram = measure_ram_read_gbps(threads, stream)
    step("fixed costs of a decode step")
    steps = measure_steps(threads)

    def kernels_pass(n: int) -> tuple[list[KernelRates], list[AttentionRates], list[ElementwiseRates]]:
        kernels: list[KernelRates] = []
        attention: list[AttentionRates] = []
        elementwise: list[ElementwiseRates] = []
        label = f" (pass {n} of {KERNEL_PASSES})" if KERNEL_PASSES > 1 else ""
        with CpuKernels() as cpu:
            for name in dict.fromkeys(t.lower() for t in weight_types):
                step(f"{name} kernels{label}")
                rates = _kernel_rates(cpu, name, threads, stream)
                if rates is not None:
                    kernels.append(rates)
            for kv in kv_types:
                step(f"{kv} attention{label}")
                attention.extend(_attention_rates(cpu, kv, threads, stream))
            step(f"elementwise steps{label}")
            elementwise.extend(_elementwise_rates(cpu, threads))
        return kernels, attention, elementwise

    kernels, attention, elementwise = kernels_pass(1)
    # The built-in model's run is read once before each later pass of the kernels and once after
    # (reference_run.READINGS): moments some seconds apart, whose mean is steadier than readings back
    # to back (see READINGS).
    model = embedded_model_path() if reference else None
    session = None
    if model is not None:
        step("the built-in model")
        session = _reference_session(model, threads)
    try:
        for n in range(2, KERNEL_PASSES + 1):
            session = _read_reference(session, cancelled)
            more_kernels, more_attention, more_elementwise = kernels_pass(n)
            kernels, attention = faster_kernels(kernels, more_kernels), faster_attention(attention, more_attention)
            elementwise = faster_elementwise(elementwise, more_elementwise)
        while session is not None and session.readings < READINGS:
            step("the built-in model (again)")
            session = _read_reference(session, cancelled)
        ref = session.result() if session is not None else None
    finally:
        if session is not None:
            session.close()
    step("pace gauge")
    with CpuKernels() as cpu:  # the first readings replies are compared with (speed/pace.py)
        pace = tuple(RateAt(t, pace_ms_with(cpu, t)) for t in threads)
    probe = HostProbe(
        measured_at=_now(),
        duration_s=round(time.perf_counter() - t_start, 3),
        cpu_variant=cpu_variant,
        ram_read_gbps=tuple(ram),
        steps=steps,
        kernels=tuple(kernels),
        attention=tuple(attention),
        others_cpu_share=round(cpu_load.others_share(load_start), 3),
        reference=ref,
        pace_ms=pace,
        elementwise=tuple(elementwise),
    )
    _log.info(
        "speed probe: %.2f s, RAM %.1f GB/s, other programs used %.0f%% of the CPU",
        probe.duration_s,
        probe.ram_peak_gbps,
        100 * probe.others_cpu_share,
    )
    return probe


def _reference_session(model: Path, threads: Sequence[int]) -> ReferenceSession | None:
    try:
        return ReferenceSession(model, threads)
    except Exception:  # the kernels' figures stand on their own; the plan says what is missing
        _log.warning("speed probe: the built-in model did not load", exc_info=True)
        return None


def _read_reference(session: ReferenceSession | None, check: Callable[[], None]) -> ReferenceSession | None:
    """The session after one more reading, or None (closed) when llama.cpp failed to run it."""
    if session is None:
        return None
    try:
        session.read(check)
        return session
    except ProbeCancelled:
        raise  # the caller closes the session
    except Exception:  # as above: no run rather than half of one
        _log.warning("speed probe: the built-in model did not run", exc_info=True)
        session.close()
        return None


def probe_outdated(probe: HostProbe) -> bool:
    """Whether the app should measure again at this start: the last probe came from a version that
    did not run the built-in model (whose run corrects every prediction), read it a shorter prompt
    than now (too shallow to price a prompt's attention), or did not time the elementwise steps
    (which price a prompt's norms and activations), the mat-vec over rows of SHORTEST_ROW (a small
    model's rows) or the cost of each product in a chain of them.

    A probe taken while the machine was busy is not outdated: it stands, labelled "measured while
    busy", until replies show that it read a slow moment (MachineSpeed.probe_read_slow) or a
    measurement at a quiet moment replaces it. Measuring again at every start would never end on a
    desktop that is always busy, and each run would take the CPU from the user's own work."""
    from vrampilot.paths import embedded_model_path

    if probe.elementwise is None or any(not k.decode_shortest_gbps or not k.matvec_overhead_us for k in probe.kernels):
        return True
    if embedded_model_path() is None:
        return False
    ref = probe.reference
    if ref is None:
        return True
    # Every thread count reads a prompt of its own (speed/reference_run.py), the largest 4 ubatches.
    counts = {d.threads for d in ref.decode}
    return len(ref.prefill) < PREFILL_UBATCHES or not counts <= {p.threads for p in ref.prefill}


def missing_kernels(probe: HostProbe, types: Sequence[str]) -> list[str]:
    """The weight types among `types` that the probe can measure but has not."""
    return [t for t in dict.fromkeys(x.lower() for x in types) if t in ALL_WEIGHT_TYPES and probe.kernel(t) is None]


def measure_kernels(types: Sequence[str], physical_cores: int) -> tuple[KernelRates, ...]:
    """Rates of these weight types (two passes, seconds per type), for a model whose types the
    first-start probe did not cover."""
    from vrampilot.llamacpp import CpuKernels

    threads = probe_threads(physical_cores)
    stream = stream_bytes()
    added: list[KernelRates] = []
    with CpuKernels() as cpu:
        for n in range(KERNEL_PASSES):  # as the first-start probe: each figure the faster pass
            this_pass = []
            for name in dict.fromkeys(t.lower() for t in types):
                rates = _kernel_rates(cpu, name, threads, stream)
                if rates is not None:
                    this_pass.append(rates)
            added = this_pass if n == 0 else faster_kernels(added, this_pass)
    return tuple(added)
