"""Settings search: choose what the user did not pin, predict memory and speed, say why.

Order of preference (planner.md): keep the whole model on the GPU at the context asked for; to get
there, quantize the KV cache f16 -> q8_0 -> q4_0 before giving up layers; then take the largest
batch the headroom allows. Only K/V pairs with CUDA flash-attention kernels are chosen unless pinned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from vrampilot.errors import UserError
from vrampilot.gguf import ModelSpec
from vrampilot.planner.compute import FORMULA, GraphEstimate
from vrampilot.planner.kv import kv_refusal
from vrampilot.planner.memory import MemoryBreakdown, memory_breakdown
from vrampilot.planner.settings import KV_CACHE_TYPES, QUANTIZED_KV_TYPES, Settings
from vrampilot.planner.speed import HEADLINE_PROMPT_TOKENS, SpeedPrediction, predict_speed
from vrampilot.planner.speed_basis import speed_basis
from vrampilot.planner.target import Target
from vrampilot.units import format_bytes, format_tokens

DEFAULT_MAX_CTX = 32768
MIN_CTX = 512
# Same-type pairs that default CUDA builds have flash-attention kernels for, in order of quality.
PREFERRED_KV = ("f16", "q8_0", "q4_0")
FA_KERNEL_PAIRS = frozenset({("f16", "f16"), ("bf16", "bf16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")})
UBATCH_CHOICES = (2048, 1024, 512, 256, 128)
DEFAULT_UBATCH = 512
DEFAULT_BATCH = 2048
# ggml's GGML_MAX_N_THREADS: more threads crash llama.cpp.
MAX_THREADS = 512
# Bits per weight of common quantizations, for "which file would fit" suggestions.
QUANT_BPW = (
    ("Q8_0", 8.5),
    ("Q6_K", 6.56),
    ("Q5_K_M", 5.69),
    ("Q4_K_M", 4.85),
    ("IQ4_XS", 4.25),
    ("Q3_K_M", 3.91),
    ("IQ3_XXS", 3.06),
    ("Q2_K", 2.96),
    ("IQ2_XS", 2.31),
)


FULL_PRECISION_KV = frozenset({"f16", "bf16", "f32"})  # K/V cache types that are not quantized


@dataclass(frozen=True)
class Pins:
    """What the user fixed. None means: the planner chooses."""

    n_ctx: int | None = None
    type_k: str | None = None
    type_v: str | None = None
    n_gpu_layers: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    n_threads: int | None = None
    n_threads_batch: int | None = None
    flash_attn: bool | None = None
    swa_full: bool | None = None
    tensor_split: tuple[float, ...] | None = None  # shares per offload device, in the target's order

    def pinned(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Alternative:
    label: str
    settings: Settings
    memory: MemoryBreakdown
    fits: bool
    speed: SpeedPrediction
    refused: str | None = None

    @property
    def memory_total_bytes(self) -> int:
        return self.memory.device.total_bytes if self.memory.device.total_bytes else self.memory.host.total_bytes


@dataclass(frozen=True)
class Plan:
    spec: ModelSpec
    target: Target
    pins: Pins
    settings: Settings
    memory: MemoryBreakdown
    fits: bool
    speed: SpeedPrediction
    reasons: tuple[str, ...]
    alternatives: tuple[Alternative, ...] = ()
    refused: str | None = None  # llama.cpp would refuse these settings (only possible when pinned)
    suggestion: str | None = None  # when nothing fits: what would
    warnings: tuple[str, ...] = field(default=())
    graph: GraphEstimate = FORMULA  # how the compute buffer was sized (see compute.GraphEstimate)
    exact: bool = False  # asked llama.cpp for the compute buffer (plan(exact=True))

    @property
    def compute_source(self) -> str:
        """"llama.cpp" when the chosen settings' compute buffer is llama.cpp's own number."""
        return "llama.cpp" if self.graph.is_measured(self.settings) else "estimate"

    @property
    def device_budget_bytes(self) -> int:
        return self.target.device_budget_bytes

    @property
    def host_budget_bytes(self) -> int:
        return self.target.host_ram_bytes


class PlanError(UserError, ValueError):
    """Pins that cannot make a plan (a cache type the head size rules out, ...); the message says why."""


def _validate(spec: ModelSpec, pins: Pins) -> None:
    for name in ("type_k", "type_v"):
        v = getattr(pins, name)
        if v is not None and v not in KV_CACHE_TYPES:
            raise PlanError(f"unknown cache type {v!r} for {name}; llama.cpp accepts {', '.join(KV_CACHE_TYPES)}")
    if pins.n_ctx is not None and pins.n_ctx < 1:
        raise PlanError("context length must be positive")
    for name in ("n_batch", "n_ubatch", "n_threads", "n_threads_batch"):
        v = getattr(pins, name)
        if v is not None and v < 1:
            raise PlanError(f"{name} must be at least 1")
    for name in ("n_threads", "n_threads_batch"):
        v = getattr(pins, name)
        if v is not None and v > MAX_THREADS:
            # Past ggml's limit llama.cpp crashes (or OpenMP aborts) instead of refusing.
            raise PlanError(f"{name} must be at most {MAX_THREADS} (llama.cpp's limit)")
    if pins.n_gpu_layers is not None and pins.n_gpu_layers < 0:
        raise PlanError("GPU layers must be 0 or more")


def _fits(mem: MemoryBreakdown, target: Target) -> bool:
    return _devices_fit(mem, target) and _host_bytes(mem, target) <= target.host_ram_bytes


def _devices_fit(mem: MemoryBreakdown, target: Target) -> bool:
    """Every offload device within its own budget (a sum could hide one full card)."""
    return all(c.total_bytes <= g.memory_budget_bytes for c, g in zip(mem.per_device, target.gpus, strict=False))


def _host_bytes(mem: MemoryBreakdown, target: Target) -> int:
    """What the plan takes from system RAM: the host's part, and an integrated GPU's, whose
    "VRAM" is that same RAM (counted once, here)."""
    shared = sum(c.total_bytes - c.margin_bytes for c, g in zip(mem.per_device, target.gpus, strict=False)
                 if g.kind == "igpu")  # fmt: skip
    return mem.host.total_bytes + shared


def _threads(target: Target, full_offload: bool) -> tuple[int, int]:
    phys = target.cpu_physical_cores
    if full_offload:
        # The CPU only schedules GPU work and samples; more threads just spin and slow decoding.
        return min(2, phys), phys
    return phys, phys


def _evaluate(
    spec: ModelSpec, s: Settings, target: Target, g: GraphEstimate = FORMULA
) -> tuple[MemoryBreakdown, bool, SpeedPrediction]:
    mem = memory_breakdown(spec, s, target, g)
    return mem, _fits(mem, target), predict_speed(spec, s, target, mem)


def _kv_candidates(pins: Pins, flash_attn: bool | None, has_gpu: bool) -> list[tuple[str, str]]:
    if pins.type_k and pins.type_v:
        return [(pins.type_k, pins.type_v)]
    if pins.type_k or pins.type_v:
        # One of them pinned: on a GPU the other follows it (CUDA's flash-attention kernels need
        # one type for both); on the CPU it stays the planner's, full precision first.
        pinned = pins.type_k or pins.type_v or "f16"
        others = [pinned] if has_gpu else list(PREFERRED_KV)
        if pins.type_k:
            # A quantized V needs flash attention.
            vs = [v for v in others if flash_attn is not False or v not in QUANTIZED_KV_TYPES] or ["f16"]
            return [(pinned, v) for v in vs]
        return [(k, pinned) for k in others]
    pairs = [(t, t) for t in PREFERRED_KV]
    if flash_attn is False:
        # Without flash attention llama.cpp refuses a quantized V cache; only K may be quantized.
        pairs = [("f16", "f16"), ("q8_0", "f16"), ("q4_0", "f16")]
    return pairs


def _ctx_target(spec: ModelSpec, pins: Pins) -> int:
    if pins.n_ctx is not None:
        return pins.n_ctx
    return max(MIN_CTX, min(spec.n_ctx_train or DEFAULT_MAX_CTX, DEFAULT_MAX_CTX))


def plan(
    spec: ModelSpec, target: Target, pins: Pins | None = None, *, alternatives: bool = True, exact: bool = False
) -> Plan:
    """Choose settings for `spec` on `target` honouring `pins`.

    exact: after the search, ask llama.cpp's own allocator (a no_alloc dry run of the installed
    llama-cpp-python, 1-25 ms once the header is loaded) for the chosen settings' compute buffer,
    search again with the formula corrected by what it said, and report the measured number. The
    first dry run of a file also loads its header (1-500 ms); later plans of the same file reuse it.
    Falls back to the formula when llama.cpp cannot read the file.
    """
    pins = pins or Pins()
    _validate(spec, pins)
    g = FORMULA
    chosen, fits, tried = _choose(spec, target, pins, g)
    if exact:
        # The measurement can move the choice (a tighter or looser compute buffer); a few rounds
        # settle it, each measuring the settings the previous one chose. Measurements accumulate,
        # so a choice that swings between two settings settles once both are measured; three
        # rounds were too few for a device budget that cuts into the layers (a partial offload
        # then planned its device's compute buffer from the formula, 12.4 MiB for 18.6 real).
        for _ in range(6):
            if g.is_measured(chosen):
                break
            learned = _measure(spec, target, chosen, g)
            if learned is None:
                break
            g = learned
            chosen, fits, tried = _choose(spec, target, pins, g)
    return _finish(spec, target, pins, chosen, fits, tried, g, alternatives, exact)


def _measure(spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate) -> GraphEstimate | None:
    """Ask llama.cpp for the compute buffers of `s` (see measure.graph_compute): on the target's
    own devices when this machine has them, else the whole graph on the CPU."""
    from vrampilot.planner.compute import GRAPH, HOST, dry_run_surplus_bytes
    from vrampilot.planner.measure import graph_compute

    on_devices = target.devices_here and s.n_gpu_layers > 0 and all(gpu.llama_name for gpu in target.gpus)
    devices = tuple(gpu.llama_name or "" for gpu in target.gpus)
    m = graph_compute(spec.path, s, devices if on_devices else None)
    if m is None or m.refused:
        return None
    formula = memory_breakdown(spec, s, target, FORMULA)
    if not on_devices:
        whole = FORMULA.graph_bytes(spec, s)
        return g.learn(s, {GRAPH: m.total_bytes}, whole)
    names = [gpu.buffer_name or gpu.name for gpu in target.gpus]
    buffers: dict[str, int] = {}
    for name, n in m.compute_bytes.items():
        label = name if name in names else HOST  # CPU, CUDA_Host, ...: the host side
        if formula.pipelined and label in names[1:]:
            n -= dry_run_surplus_bytes(spec, s)  # the dry run's over-count on later devices
        buffers[label] = buffers.get(label, 0) + n
    return g.learn(s, buffers, formula.device.compute_bytes + formula.host.compute_bytes)


def _choose(
    spec: ModelSpec, target: Target, pins: Pins, g: GraphEstimate
) -> tuple[Settings, bool, list[tuple[Settings, MemoryBreakdown, bool]]]:
    """The search proper: the settings, whether the search found a fit, and what it tried."""
    n_ctx = _ctx_target(spec, pins)
    has_gpu = target.has_gpu
    max_ngl = spec.n_layer + 1
    flash = pins.flash_attn if pins.flash_attn is not None else True
    swa_full = bool(pins.swa_full) if pins.swa_full is not None else False
    ubatch0 = pins.n_ubatch or DEFAULT_UBATCH

    def make(kv: tuple[str, str], ngl: int, ubatch: int) -> Settings:
        full = has_gpu and ngl >= max_ngl
        t, tb = _threads(target, full)
        s = Settings(
            n_ctx=n_ctx,
            type_k=kv[0],
            type_v=kv[1],
            n_gpu_layers=ngl if has_gpu else 0,
            n_batch=pins.n_batch or max(DEFAULT_BATCH, ubatch),
            # llama.cpp caps ubatch at batch: never plan memory for a ubatch that cannot apply.
            n_ubatch=min(ubatch, pins.n_batch) if pins.n_batch else ubatch,
            n_threads=pins.n_threads or t,
            n_threads_batch=pins.n_threads_batch or tb,
            flash_attn=flash,
            swa_full=swa_full,
        )
        devices, rpc = _device_settings(target)
        return _with_split(spec, target, s.with_(devices=devices, rpc_servers=rpc), pins, g)

    kv_pairs = _kv_candidates(pins, pins.flash_attn, has_gpu)
    tried: list[tuple[Settings, MemoryBreakdown, bool]] = []
    chosen: Settings | None = None

    if not has_gpu:
        for kv in kv_pairs:
            s = make(kv, 0, ubatch0)
            mem, ok, _ = _evaluate(spec, s, target, g)
            tried.append((s, mem, ok))
            if ok:
                chosen = s
                break
    else:
        ngl_options = [pins.n_gpu_layers] if pins.n_gpu_layers is not None else [max_ngl]
        ub_options = [ubatch0] if pins.n_ubatch else [DEFAULT_UBATCH, 256]
        for kv in kv_pairs:
            for ub in ub_options:
                s = make(kv, min(ngl_options[0], max_ngl), ub)
                mem, ok, _ = _evaluate(spec, s, target, g)
                tried.append((s, mem, ok))
                if ok:
                    chosen = s
                    break
            if chosen:
                break
        if chosen is None and pins.n_gpu_layers is None:
            # Give up layers: the most layers that fit, for each acceptable KV pair; q4_0 only if
            # pinned, since it hurts quality and a CPU layer costs more than it saves.
            partial_pairs = kv_pairs if (pins.type_k or pins.type_v) else [p for p in kv_pairs if p[0] != "q4_0"]
            best: tuple[float, Settings] | None = None
            for kv in partial_pairs:
                ngl = _max_layers(spec, target, partial(make, kv, ubatch=ubatch0), g)
                if ngl is None:
                    continue
                s = make(kv, ngl, ubatch0)
                mem, ok, sp = _evaluate(spec, s, target, g)
                tried.append((s, mem, ok))
                if ok and (best is None or sp.decode_tps > best[0] * 1.02):
                    best = (sp.decode_tps, s)
            if best:
                chosen = best[1]

    if chosen is not None and pins.n_ubatch is None:
        chosen = _grow_ubatch(spec, target, chosen, pins, g)

    fits = chosen is not None
    if chosen is None:
        chosen = tried[0][0] if tried else make(kv_pairs[0], 0, ubatch0)
        if has_gpu and pins.n_gpu_layers is None:
            chosen = make((chosen.type_k, chosen.type_v), 0, ubatch0)
    return chosen, fits, tried


def _finish(
    spec: ModelSpec,
    target: Target,
    pins: Pins,
    chosen: Settings,
    fits: bool,
    tried: list[tuple[Settings, MemoryBreakdown, bool]],
    g: GraphEstimate,
    alternatives: bool,
    exact: bool,
) -> Plan:
    has_gpu = target.has_gpu
    mem, ok, speed = _evaluate(spec, chosen, target, g)
    fits = fits and ok
    refused = kv_refusal(spec, chosen)
    if refused:
        fits = False
    reasons = _reasons(spec, target, pins, chosen, mem, speed, tried, fits, g.is_measured(chosen), refused)
    # Another file cannot cure a refusal (a setting llama.cpp rejects), only a change of settings.
    suggestion = None if fits or refused else _suggest_quant(spec, target, chosen, g)
    warnings: list[str] = list(target.notes)
    # Speed predictions rest on the bandwidth; say when it is an assumption, not a reading.
    warnings += [f"{g.name}: {g.bandwidth_note}" for g in target.gpus if g.bandwidth_note]
    if (chosen.type_k, chosen.type_v) not in FA_KERNEL_PAIRS and has_gpu and chosen.flash_attn:
        warnings.append(
            f"K={chosen.type_k}/V={chosen.type_v} has no CUDA flash-attention kernel in default builds: "
            "attention would run on the CPU and prompts get 8-30x slower"
        )
    if chosen.n_ctx > spec.n_ctx_train > 0:
        warnings.append(
            f"context {format_tokens(chosen.n_ctx)} is beyond the {format_tokens(spec.n_ctx_train)} "
            "the model was trained for: quality drops past it"
        )
    alts = tuple(_alternatives(spec, target, chosen, g)) if alternatives else ()
    return Plan(
        spec=spec,
        target=target,
        pins=pins,
        settings=chosen,
        memory=mem,
        fits=fits,
        speed=speed,
        reasons=tuple(reasons),
        alternatives=alts,
        refused=refused,
        suggestion=suggestion,
        warnings=tuple(warnings),
        graph=g,
        exact=exact,
    )


def _device_settings(target: Target) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """--device and --rpc for a target of several devices or RPC hosts (one local GPU: neither,
    llama.cpp's default device is it)."""
    gpus = target.gpus
    if len(gpus) < 2 and not any(g.kind == "rpc" for g in gpus):
        return (), ()
    endpoints = tuple(dict.fromkeys(g.endpoint for g in gpus if g.kind == "rpc" and g.endpoint))
    names = tuple(g.llama_name for g in gpus if g.llama_name)
    return (names if len(names) == len(gpus) else ()), endpoints


def _with_split(spec: ModelSpec, target: Target, s: Settings, pins: Pins, g: GraphEstimate) -> Settings:
    """The -ts for several devices: the user's, or shares that fill each device alike. A device's
    share of the layers is what its budget leaves after what it holds whatever the split (its
    margin and compute buffer, and the output layer on the last one), so that no card fills up
    while another has room (llama.cpp's own default, free memory alone, ignores those)."""
    n = len(target.gpus)
    if n < 2 or s.n_gpu_layers <= 0:
        return s
    if pins.tensor_split is not None:
        return s.with_(tensor_split=tuple(pins.tensor_split))
    shares = tuple(float(max(gpu.memory_budget_bytes, 1)) for gpu in target.gpus)
    s = s.with_(tensor_split=_rounded(shares))
    per_layer = max(spec.layer_weight_bytes, default=1) + max(memory_breakdown(spec, s, target, g).kv.per_layer_bytes,
                                                               default=0)  # fmt: skip
    for _ in range(2):
        mem = memory_breakdown(spec, s, target, g)
        room = []
        for d, (c, gpu) in enumerate(zip(mem.per_device, target.gpus, strict=True)):
            layers = sum(1 for x in mem.layer_devices if x == d)
            fixed = c.total_bytes - layers * per_layer
            room.append(max(gpu.memory_budget_bytes - fixed, 0) / max(per_layer, 1))
        if sum(room) <= 0:
            break
        s = s.with_(tensor_split=_rounded(tuple(room)))
    return s


def _rounded(shares: tuple[float, ...]) -> tuple[float, ...]:
    """Shares as a user reads and types them: per mille of the total, at least 1 each."""
    total = sum(shares) or 1.0
    return tuple(float(max(1, round(1000 * x / total))) for x in shares)


def _max_layers(spec: ModelSpec, target: Target, build: Callable[[int], Settings], g: GraphEstimate) -> int | None:
    """Largest -ngl that fits, or None.

    VRAM use only grows with every layer moved to the GPU and host use only shrinks, so the
    settings that fit form one range of layer counts: find its top by bisection on the GPU side,
    then check the host side there.
    """

    def device_fits(n: int) -> bool:
        return _devices_fit(memory_breakdown(spec, build(n), target, g), target)

    lo, hi = 0, spec.n_layer + 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if device_fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo if _fits(memory_breakdown(spec, build(lo), target, g), target) else None


def _grow_ubatch(spec: ModelSpec, target: Target, s: Settings, pins: Pins, g: GraphEstimate) -> Settings:
    # Larger ubatches speed prompts up; take the largest the headroom allows. On the CPU the gain
    # is small and the compute buffer grows, so stay at the default there.
    if not target.has_gpu or s.n_ubatch < DEFAULT_UBATCH:
        return s
    for ub in UBATCH_CHOICES:
        if ub <= s.n_ubatch:
            break
        if pins.n_batch and ub > pins.n_batch:
            continue  # llama.cpp caps ubatch at batch
        cand = s.with_(n_ubatch=ub, n_batch=pins.n_batch or max(DEFAULT_BATCH, ub))
        if _fits(memory_breakdown(spec, cand, target, g), target):
            return cand
    return s


def _alt(spec: ModelSpec, target: Target, label: str, s: Settings, g: GraphEstimate) -> Alternative:
    mem, ok, sp = _evaluate(spec, s, target, g)
    refused = kv_refusal(spec, s)
    return Alternative(label, s, mem, ok and not refused, sp, refused)


def _alternatives(spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate) -> Iterable[Alternative]:
    seen = {s}

    def emit(label: str, cand: Settings) -> Alternative | None:
        if cand in seen:
            return None
        seen.add(cand)
        return _alt(spec, target, label, cand, g)

    out: list[Alternative | None] = []
    up = _next_ctx(s.n_ctx, up=True)
    down = _next_ctx(s.n_ctx, up=False)
    out.append(emit(f"{format_tokens(up)} context", s.with_(n_ctx=up)))
    if down >= MIN_CTX:
        out.append(emit(f"{format_tokens(down)} context", s.with_(n_ctx=down)))
    for t in PREFERRED_KV:
        if (t, t) != (s.type_k, s.type_v):
            out.append(emit(f"{t} KV cache", s.with_(type_k=t, type_v=t, flash_attn=True)))
            if t != "f16":
                out.append(emit(f"{format_tokens(up)} context with {t} KV", s.with_(n_ctx=up, type_k=t, type_v=t)))
    if target.has_gpu:
        if s.n_gpu_layers > 0:
            out.append(emit("one fewer GPU layer", s.with_(n_gpu_layers=s.n_gpu_layers - 1)))
        if s.n_gpu_layers < spec.n_layer + 1:
            out.append(emit("all layers on the GPU", s.with_(n_gpu_layers=spec.n_layer + 1)))
    if s.n_ubatch > 128:
        out.append(emit(f"ubatch {s.n_ubatch // 2}", s.with_(n_ubatch=s.n_ubatch // 2)))
    if s.n_ubatch < 2048:
        ub = s.n_ubatch * 2
        out.append(emit(f"ubatch {ub}", s.with_(n_ubatch=ub, n_batch=max(s.n_batch, ub))))
    if s.flash_attn and s.type_v not in QUANTIZED_KV_TYPES:
        out.append(emit("flash attention off", s.with_(flash_attn=False)))
    return [a for a in out if a is not None]


def _next_ctx(n: int, up: bool) -> int:
    p: int = 2 ** math.floor(math.log2(max(n, 1)))
    if up:
        return p * 2
    return p // 2 if p == n else p


def _reasons(
    spec: ModelSpec,
    target: Target,
    pins: Pins,
    s: Settings,
    mem: MemoryBreakdown,
    speed: SpeedPrediction,
    tried: list[tuple[Settings, MemoryBreakdown, bool]],
    fits: bool,
    compute_measured: bool = False,
    refused: str | None = None,
) -> list[str]:
    r: list[str] = []
    by = ", sized by llama.cpp's own allocator" if compute_measured else ""
    gpu = target.has_gpu
    budget = target.device_budget_bytes if gpu else target.host_ram_bytes
    where = "VRAM" if gpu else "RAM"

    def total(m: MemoryBreakdown) -> int:
        return m.device.total_bytes if gpu else m.host.total_bytes

    # Context
    if pins.n_ctx is not None:
        r.append(f"{format_tokens(s.n_ctx)} context: pinned by you.")
    else:
        cap = "" if spec.n_ctx_train <= DEFAULT_MAX_CTX else f", capped at {format_tokens(DEFAULT_MAX_CTX)}"
        r.append(
            f"{format_tokens(s.n_ctx)} context: what the model was trained for "
            f"({format_tokens(spec.n_ctx_train)}){cap}; llama.cpp pads the cache to {mem.kv.n_cells} cells."
        )
    # KV cache type
    kv_text = f"{s.type_k}" if s.type_k == s.type_v else f"K {s.type_k} / V {s.type_v}"
    if pins.type_k and pins.type_v:
        r.append(f"{kv_text} KV cache: pinned by you ({format_bytes(mem.kv.total_bytes)}).")
    elif pins.type_k or pins.type_v:
        which, pinned, other, other_t = ("K", s.type_k, "V", s.type_v) if pins.type_k else ("V", s.type_v, "K", s.type_k)
        why = (
            "matches it: CUDA's flash-attention kernels need one type for both"
            if gpu and other_t == pinned
            else ("full precision fits" if other_t in FULL_PRECISION_KV else "the most precise that fits")
        )
        r.append(f"{which} {pinned} pinned by you; {other} {other_t}: {why} ({format_bytes(mem.kv.total_bytes)}).")
    else:
        rejected = [
            (t, m)
            for t, m, ok in tried
            if not ok and (t.type_k, t.type_v) != (s.type_k, s.type_v) and t.n_gpu_layers == s.n_gpu_layers
        ]
        seen_types: set[str] = set()
        parts = []
        for t, m in rejected:
            if t.type_k in seen_types:
                continue
            seen_types.add(t.type_k)
            parts.append(
                f"{t.type_k} KV would need {format_bytes(m.kv.total_bytes)}, "
                f"{format_bytes(total(m) - budget)} over the {format_bytes(budget)} {where}"
            )
        if parts:
            r.append(
                f"{kv_text} KV cache at {format_tokens(s.n_ctx)} context: "
                + "; ".join(parts)
                + f"; {kv_text} KV ({format_bytes(mem.kv.total_bytes)}) fits with "
                f"{format_bytes(budget - total(mem))} to spare."
                if fits
                else f"{kv_text} KV cache: " + "; ".join(parts) + "."
            )
        elif {s.type_k, s.type_v} <= FULL_PRECISION_KV:
            r.append(
                f"{kv_text} KV cache ({format_bytes(mem.kv.total_bytes)}): full precision fits, "
                "so the cache is not quantized."
            )
        else:
            # Quantized though no full-precision cache was refused at this offload: it was traded
            # for layers (a full-precision cache fits only with fewer of them on the GPU).
            full = [t for t, _m, ok in tried if ok and {t.type_k, t.type_v} <= FULL_PRECISION_KV]
            most = max((t.n_gpu_layers for t in full), default=None)
            trade = (f"a full-precision cache fits only with {most} layers on the GPU, {s.n_gpu_layers} with this one"
                     if most is not None and most < s.n_gpu_layers else "it keeps more of the model on the GPU")  # fmt: skip
            r.append(f"{kv_text} KV cache ({format_bytes(mem.kv.total_bytes)}): quantized because {trade}.")
    if spec.has_swa:
        n_swa = sum(spec.swa_layers)
        if s.swa_full:
            r.append(f"--swa-full on: the {n_swa} sliding-window layers keep all {mem.kv.n_cells} cells.")
        else:
            r.append(
                f"{n_swa} of {spec.n_layer} layers use a {spec.sliding_window}-token sliding window and keep only "
                f"{mem.kv.n_cells_swa} cells (llama-server's default; --swa-full on keeps them all)."
            )
    # GPU layers
    if gpu:
        max_ngl = spec.n_layer + 1
        if pins.n_gpu_layers is not None:
            r.append(f"{s.n_gpu_layers} of {max_ngl} layers on the GPU: pinned by you.")
        elif s.n_gpu_layers >= max_ngl:
            r.append(
                f"All {max_ngl} layers on the GPU (the {spec.n_layer} blocks and the output layer): "
                f"{format_bytes(mem.device.total_bytes)} of {format_bytes(budget)} VRAM with the "
                f"{format_bytes(mem.device.margin_bytes)} safety margin."
            )
        else:
            r.append(
                f"{s.n_gpu_layers} of {max_ngl} layers on the GPU: one more would pass the "
                f"{format_bytes(budget)} VRAM; the {max_ngl - s.n_gpu_layers} layers on the CPU are read at "
                f"system-memory speed, which sets the pace ({speed.decode_tps:.1f} tokens/s)."
            )
    else:
        r.append(
            "No GPU in this plan: every layer runs on the CPU "
            f"({format_bytes(mem.host.total_bytes)} of {format_bytes(budget)} usable RAM)."
        )
    if gpu and (len(target.gpus) > 1 or any(g.kind == "rpc" for g in target.gpus)):
        r.extend(_device_reasons(spec, target, pins, s, mem, speed))
    # Batch
    if pins.n_ubatch is not None:
        r.append(f"ubatch {s.n_ubatch}: pinned by you; batch {s.n_batch}.")
    elif pins.n_batch is not None:
        capped = " (llama.cpp caps ubatch at batch)" if s.n_ubatch == s.n_batch < DEFAULT_UBATCH else ""
        r.append(f"batch {s.n_batch}: pinned by you; ubatch {s.n_ubatch}{capped}.")
    elif gpu and s.n_ubatch > DEFAULT_UBATCH:
        r.append(
            f"ubatch {s.n_ubatch}, batch {s.n_batch}: headroom allows a larger compute buffer "
            f"({format_bytes(mem.device.compute_bytes)}{by}), so prompts are processed faster."
        )
    elif s.n_ubatch < DEFAULT_UBATCH:
        r.append(f"ubatch {s.n_ubatch}: the default 512 would not fit; prompts are processed a little slower.")
    else:
        r.append(
            f"ubatch {s.n_ubatch}, batch {s.n_batch}: llama-server's defaults; compute buffer "
            f"{format_bytes(mem.device.compute_bytes if gpu else mem.host.compute_bytes)}{by}."
        )
    # Threads
    if pins.n_threads is not None:
        r.append(f"{_threads_text(s.n_threads)}: pinned by you.")
    elif gpu and s.n_gpu_layers >= spec.n_layer + 1:
        r.append(
            f"{_threads_text(s.n_threads)} for generation: everything runs on the GPU, and more CPU threads only "
            f"spin; {s.n_threads_batch} for prompts."
        )
    else:
        r.append(
            f"{_threads_text(s.n_threads)}: one per physical core ({target.cpu_physical_cores}); hyper-threads add "
            "nothing to memory-bound decoding."
        )
    # Flash attention
    if pins.flash_attn is not None:
        r.append(f"Flash attention {'on' if s.flash_attn else 'off'}: pinned by you.")
    elif s.type_v in QUANTIZED_KV_TYPES:
        r.append("Flash attention on: llama.cpp requires it for a quantized V cache.")
    else:
        r.append("Flash attention on: smaller compute buffer and faster long prompts.")
    # Outcome
    if refused:
        r.append(f"llama.cpp would refuse these settings: {refused}.")
    elif fits:
        r.append(
            f"Predicted {speed.decode_tps:.1f} tokens/s generating "
            f"({speed.decode_tps_full_ctx:.1f} with the context full), {speed.prefill_tps:.0f} tokens/s "
            f"reading a {min(HEADLINE_PROMPT_TOKENS, s.n_ctx)}-token prompt ({speed.prefill_tps_full_ctx:.0f} "
            "reading one that fills the context)."
        )
        r.append(speed_basis(spec, target, s, speed))
    else:
        over = total(mem) - budget
        r.append(
            f"Does not fit: needs {format_bytes(total(mem))} of {where}, {format_bytes(max(over, 0))} more "
            f"than the {format_bytes(budget)} available."
            if over > 0
            else "Does not fit in system RAM."
        )
    return r


def _device_reasons(
    spec: ModelSpec, target: Target, pins: Pins, s: Settings, mem: MemoryBreakdown, speed: SpeedPrediction
) -> list[str]:
    """One line per device: which layers, how full; then the split and what the network costs."""
    from vrampilot.planner.speed import network_share

    lines = []
    for d, (gpu, c) in enumerate(zip(target.gpus, mem.per_device, strict=False)):
        layers = mem.device_layers(d)
        what = _ranges(layers) + (" + output" if mem.output_device == d else "")
        state = "" if c.total_bytes <= gpu.memory_budget_bytes else f", {format_bytes(c.total_bytes - gpu.memory_budget_bytes)} too much"
        budget = f"{format_bytes(gpu.memory_budget_bytes)}{' pinned' if gpu.budget_pinned else ''}"
        lines.append(f"{gpu.label}: {what or 'nothing'}, {format_bytes(c.total_bytes)} of {budget}{state}.")
    if s.tensor_split:
        shares = ", ".join(f"{x:g}" for x in s.tensor_split)
        why = "pinned by you" if pins.tensor_split is not None else (
            "each device's room for layers after its margin, compute buffer and (on the last) the output layer"
        )
        lines.append(f"Split -ts {shares}: {why}.")
    share = network_share(spec, target, mem) if s.n_gpu_layers > 0 else 0.0
    if share > 0.005:
        lines.append(f"Crossing to and from the RPC hosts takes {share:.0%} of each token's time "
                     f"(a round trip per hop, {max(g.rtt_ms for g in target.gpus if g.kind == 'rpc'):.1f} ms measured).")  # fmt: skip
    return lines


def _ranges(layers: Sequence[int]) -> str:
    """(0, 1, 2, 5, 6) -> "layers 0-2, 5-6"."""
    if not layers:
        return ""
    runs: list[tuple[int, int]] = []
    for il in layers:
        if runs and il == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], il)
        else:
            runs.append((il, il))
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)
    return ("layer " if len(layers) == 1 else "layers ") + text


def _threads_text(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def _suggest_quant(spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate) -> str | None:
    params = spec.n_params
    if params <= 0:
        return None
    budget = target.device_budget_bytes if target.has_gpu else target.host_ram_bytes
    small = s.with_(n_ctx=min(s.n_ctx, 4096), type_k="q8_0", type_v="q8_0", flash_attn=True)
    mem = memory_breakdown(spec, small, target, g)
    side = mem.device if target.has_gpu else mem.host
    overhead = side.total_bytes - side.weights_bytes
    current_bpw = spec.weight_bytes * 8 / params
    for name, bpw in QUANT_BPW:
        if bpw >= current_bpw - 0.05:
            continue
        weights = int(params * bpw / 8)
        if weights >= spec.weight_bytes * 0.95:
            continue  # nominal bits per weight understate small models (large embeddings): not smaller
        if weights + overhead <= budget:
            where = "on the GPU" if target.has_gpu else "in RAM"
            return (
                f"A {name} file of this model (about {format_bytes(weights)}) would fit {where} "
                f"at {format_tokens(small.n_ctx)} context with q8_0 KV."
            )
    return "No quantization of this model fits this machine; choose a smaller model."


def replan_with(plan_: Plan, **pins: object) -> Plan:
    """The same request with more pins, e.g. when the user moves a slider."""
    return plan(plan_.spec, plan_.target, replace(plan_.pins, **pins), exact=plan_.exact)  # type: ignore[arg-type]  # a dict of Pins fields; mypy cannot match **dict to each field
