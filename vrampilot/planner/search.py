"""Settings search: choose what the user did not pin, predict memory and speed; the reasons
(planner/reasons.py) say why, and the plan's types live in planner/plan.py.

Order of preference (planner.md): keep the whole model on the GPU at the context asked for; to get
there, quantize the KV cache f16 -> q8_0 -> q4_0 before giving up layers; then take the largest
batch the headroom allows. Only K/V pairs with CUDA flash-attention kernels are chosen unless pinned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial

from vrampilot.gguf import ModelSpec
from vrampilot.planner.alternatives import neighbours
from vrampilot.planner.compute import FORMULA, GraphEstimate
from vrampilot.planner.families import is_routed, loadable
from vrampilot.planner.kv import kv_refusal
from vrampilot.planner.memory import MemoryBreakdown, memory_breakdown
from vrampilot.planner.plan import (
    DEFAULT_BATCH,
    DEFAULT_MAX_CTX,
    DEFAULT_UBATCH,
    MIN_CTX,
    PREFERRED_KV,
    Alternative,
    Pins,
    Plan,
    PlanError,
)
from vrampilot.planner.projector import check_for_model
from vrampilot.planner.reasons import plan_reasons
from vrampilot.planner.settings import KV_CACHE_TYPES, QUANTIZED_KV_TYPES, Settings
from vrampilot.planner.speed import SpeedPrediction, predict_speed
from vrampilot.planner.target import Target
from vrampilot.units import format_bytes, format_tokens

FA_KERNEL_PAIRS = frozenset({("f16", "f16"), ("bf16", "bf16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")})
UBATCH_CHOICES = (2048, 1024, 512, 256, 128)
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
    shared = sum(
        c.total_bytes - c.margin_bytes for c, g in zip(mem.per_device, target.gpus, strict=False) if g.kind == "igpu"
    )
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

    An architecture the cache formula is not verified on (planner/families.py) is routed: its KV
    cache and output buffer come from the same dry runs, exact or not, so that the chosen settings
    and the verdict rest on llama.cpp's count; the search ranks candidates with the formula scaled
    by the last count. One llama.cpp does not know is refused in one line.
    """
    pins = pins or Pins()
    _validate(spec, pins)
    if pins.mmproj_path:
        check_for_model(spec, pins.mmproj_path)
    if not loadable(spec.architecture):
        arch = spec.architecture if len(spec.architecture) <= 64 else spec.architecture[:61] + "..."
        raise PlanError(f"llama.cpp cannot load this model: unknown model architecture: '{arch}'")
    g = FORMULA
    chosen, fits, tried = _choose(spec, target, pins, g)
    if exact or is_routed(spec.architecture):
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
    from vrampilot.planner.measure import PRINT_RESOLUTION_BYTES, graph_compute

    on_devices = target.devices_here and s.n_gpu_layers > 0 and all(gpu.llama_name for gpu in target.gpus)
    devices = tuple(gpu.llama_name or "" for gpu in target.gpus)
    m = graph_compute(spec.path, s, devices if on_devices else None)
    if m is None or m.refused:
        return None
    if is_routed(spec.architecture):
        g = g.count(spec, s, m.kv_bytes, m.output_bytes, PRINT_RESOLUTION_BYTES * max(m.kv_lines, 1))
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
            mmproj_path=pins.mmproj_path or "",
            mmproj_cpu=bool(pins.mmproj_cpu),
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
    reasons = plan_reasons(spec, target, pins, chosen, mem, speed, tried, fits, g.is_measured(chosen), refused)
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
    per_layer = max(spec.layer_weight_bytes, default=1) + max(
        memory_breakdown(spec, s, target, g).kv.per_layer_bytes, default=0
    )
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
    return [_alt(spec, target, label, cand, g) for label, cand in neighbours(spec, s, target.has_gpu)]


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
