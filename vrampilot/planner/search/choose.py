"""Settings search: choose what the user did not pin, predict memory and speed; the reasons
(reasons.py) say why, and the plan's types live in planner/plan.py. Pins are checked first
(pins.py), several devices are split by split.py, and the chosen settings' compute buffers come
from llama.cpp's dry run (measured_graph.py).

Order of preference (docs/planner.md): keep the whole model on the GPU at the context asked for;
to get there, quantize the KV cache f16 -> q8_0 (-> q4_0 for a dense model) before giving up
anything else; then free GPU memory where it costs least speed: a mixture of experts keeps every
layer's attention on the GPU and the routed experts of the fewest leading layers in RAM
(--n-cpu-moe), weighed against whole layers on the CPU (a dense model's only way) by predicted
decode speed; then take the largest batch the headroom allows. Only K/V pairs with CUDA
flash-attention kernels are chosen unless pinned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial

from vrampilot.gguf import ModelSpec
from vrampilot.planner.context_budget import context_budget
from vrampilot.planner.dry_run.measure import DRY_RUN_CELL_BYTES, DRY_RUN_MAX_CTX
from vrampilot.planner.errors import PlanError
from vrampilot.planner.families import is_routed, loadable
from vrampilot.planner.memory.breakdown import MemoryBreakdown, memory_breakdown
from vrampilot.planner.memory.compute import FORMULA, GraphEstimate
from vrampilot.planner.memory.kv import kv_refusal
from vrampilot.planner.memory.placement import no_repack_reason
from vrampilot.planner.memory.projector import check_for_model
from vrampilot.planner.memory.rope import cap_ctx, with_context_extension
from vrampilot.planner.memory.server_host import server_host
from vrampilot.planner.plan import (
    DEFAULT_BATCH,
    DEFAULT_MAX_CTX,
    DEFAULT_UBATCH,
    MIN_CTX,
    PREFERRED_KV,
    Alternative,
    Pins,
    Plan,
)
from vrampilot.planner.search.alternatives import experts_label, neighbours
from vrampilot.planner.search.measured_graph import measured_graph
from vrampilot.planner.search.pins import check_pins, pinned_cpu_moe
from vrampilot.planner.search.reasons import placement_text, plan_reasons
from vrampilot.planner.search.split import device_settings, with_split
from vrampilot.planner.settings import QUANTIZED_KV_TYPES, Settings
from vrampilot.planner.speed_model.predict import SpeedPrediction, predict_speed
from vrampilot.planner.target import Target
from vrampilot.units import format_bytes, format_tokens

FA_KERNEL_PAIRS = frozenset({("f16", "f16"), ("bf16", "bf16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")})
UBATCH_CHOICES = (2048, 1024, 512, 256, 128)
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
        # The CPU only schedules GPU work and samples (nothing of the model is in RAM: no layer,
        # no experts); more threads just spin and slow decoding.
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
        return cap_ctx(spec, pins.n_ctx)
    return cap_ctx(spec, max(MIN_CTX, min(spec.n_ctx_train or DEFAULT_MAX_CTX, DEFAULT_MAX_CTX), pins.min_ctx or 0))


def _kept_free(target: Target, pins: Pins) -> Target:
    """The target with the pinned bytes kept free on every offload device (its margin)."""
    if pins.keep_free_bytes is None or not target.gpus:
        return target
    keep = pins.keep_free_bytes
    return replace(
        target,
        device_margin_bytes=keep,
        gpus=tuple(replace(gpu, margin_override_bytes=keep) for gpu in target.gpus),
    )


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
    check_pins(spec, pins)
    if pins.mmproj_path:
        check_for_model(spec, pins.mmproj_path)
    if not loadable(spec.architecture):
        arch = spec.architecture if len(spec.architecture) <= 64 else spec.architecture[:61] + "..."
        raise PlanError(f"llama.cpp cannot load this model: unknown model architecture: '{arch}'")
    asked = target
    target = _kept_free(target, pins)
    g = FORMULA
    chosen, fits, tried = _choose(spec, target, pins, g)
    if exact or is_routed(spec.architecture):
        # The measurement can move the choice (a tighter or looser compute buffer); a few rounds
        # settle it, each measuring the settings the previous one chose. Measurements accumulate,
        # so a choice that swings between two settings settles once both are measured; three
        # rounds were too few for a device budget that cuts into the layers (a partial offload
        # then planned its device's compute buffer from the formula, 12.4 MiB for 18.6 real).
        for _ in range(6):
            if g.is_measured(chosen) or _ruled_out(spec, target, chosen, g):
                break
            learned = measured_graph(spec, target, chosen, g)
            if learned is None:
                break
            g = learned
            chosen, fits, tried = _choose(spec, target, pins, g)
    p = _finish(spec, target, pins, chosen, fits, tried, g, alternatives, exact)
    if not p.fits and not p.refused:
        _refuse_placement_pins(spec, asked, pins, p)
    return p if asked is target else replace(p, asked_target=asked)


def _ruled_out(spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate) -> bool:
    """Whether the formula alone already says `s` cannot fit: its weights and KV cache, which a dry
    run does not change where the cache formula is exact (a verified architecture), exceed all the
    memory the target has. llama.cpp is then not asked: its dry run allocates its cache's cell
    table on the host, 48 bytes a token (planner/dry_run/measure.py), for a plan that cannot load anyway."""
    if is_routed(spec.architecture):
        return False
    mem = memory_breakdown(spec, s, target, g)
    fixed = sum(c.weights_bytes + c.kv_bytes for c in (mem.device, mem.host))
    return fixed > target.device_budget_bytes + target.host_ram_bytes


# The pins that only constrain the search: when the plan they leave does not fit, the planner says
# which of them, and what it would choose without them, instead of a plan that cannot load.
_CONSTRAINTS = ("n_cpu_moe", "cpu_experts", "min_ctx", "keep_free_bytes")
_EXPERT_PINS = ("n_cpu_moe", "cpu_experts")


def _refuse_placement_pins(spec: ModelSpec, target: Target, pins: Pins, p: Plan) -> None:
    """A PlanError naming the constraint pins that made the plan not fit, with what fits without them."""
    moe = bool(spec.layer_expert_bytes)
    # On a file without experts, "none in RAM" constrains nothing.
    set_ = [name for name in _CONSTRAINTS if getattr(pins, name) is not None and (moe or name not in _EXPERT_PINS)]
    if not set_:
        return
    free = replace(pins, **dict.fromkeys(_CONSTRAINTS))
    try:
        without = plan(spec, target, free, alternatives=False)
    except PlanError:
        return
    if not without.fits:
        return  # nothing fits either way: the plan's own "does not fit" and suggestion say it
    dev = p.memory.device.total_bytes
    need = (
        f"needs {format_bytes(dev)} of the {format_bytes(p.target.device_budget_bytes)} VRAM" if dev else "does not fit"
    )
    raise PlanError(
        f"no plan fits with {', '.join(_pin_text(spec, pins, n) for n in set_)}: {need}. "
        f"Without {'it' if len(set_) == 1 else 'them'}: {placement_text(spec, without.settings, without.memory)}, "
        f"{format_tokens(without.settings.n_ctx)} context, {without.settings.type_k} KV, "
        f"{without.speed.decode_tps:.1f} tokens/s."
    )


def _pin_text(spec: ModelSpec, pins: Pins, name: str) -> str:
    if name == "n_cpu_moe":
        return f"experts of {pins.n_cpu_moe} of {spec.n_layer} layers in RAM (--n-cpu-moe {pins.n_cpu_moe})"
    if name == "cpu_experts":
        return "every layer's experts in RAM" if pins.cpu_experts else "no experts in RAM"
    if name == "min_ctx":
        return f"at least {format_tokens(pins.min_ctx or 0)} context"
    return f"{format_bytes(pins.keep_free_bytes or 0)} kept free per device"


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

    pinned_moe = pinned_cpu_moe(spec, pins)

    def make(kv: tuple[str, str], ngl: int, ubatch: int, n_cpu_moe: int = pinned_moe or 0) -> Settings:
        full = has_gpu and ngl >= max_ngl and n_cpu_moe == 0
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
            n_cpu_moe=n_cpu_moe if has_gpu else 0,
            # The user's -ot patterns hold in every candidate: they change where bytes live, so
            # the search sizes everything else around them.
            cpu_tensor_patterns=pins.cpu_tensor_patterns or (),
            mmproj_path=pins.mmproj_path or "",
            mmproj_cpu=bool(pins.mmproj_cpu),
            no_repack=no_repack_reason(spec, target.cpu_variant) is not None,
        )
        devices, rpc = device_settings(target)
        return with_split(spec, target, s.with_(devices=devices, rpc_servers=rpc), pins, g)

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
        full_pairs = kv_pairs
        if pinned_moe is None and not (pins.type_k or pins.type_v):
            # Experts the planner may move: one layer's experts in RAM costs a few percent of the
            # speed, less than a q4_0 cache costs in quality, so q4_0 is not bought for them.
            full_pairs = [p for p in kv_pairs if p[0] != "q4_0"]
        for kv in full_pairs:
            for ub in ub_options:
                s = make(kv, min(ngl_options[0], max_ngl), ub)
                mem, ok, _ = _evaluate(spec, s, target, g)
                tried.append((s, mem, ok))
                if ok:
                    chosen = s
                    break
            if chosen:
                break
        if chosen is None:
            # Give up GPU memory where it costs least speed. A MoE file keeps every layer's
            # attention, norms, shared experts and KV cache (and the output) on the GPU and moves
            # the routed experts of the fewest leading layers to RAM (--n-cpu-moe) that fit; whole
            # layers to the CPU are the other way, and the dense model's only one. Each is sized
            # for each acceptable KV pair (q4_0 only if pinned: it hurts quality, and what it
            # frees buys little speed), and the fastest decoding wins; an earlier candidate (more
            # precise cache, experts before layers) stays unless a later one is 2% faster.
            partial_pairs = kv_pairs if (pins.type_k or pins.type_v) else [p for p in kv_pairs if p[0] != "q4_0"]
            candidates: list[Settings] = []
            ngl_moe = min(pins.n_gpu_layers if pins.n_gpu_layers is not None else max_ngl, max_ngl)
            if pinned_moe is None:
                for kv in partial_pairs:
                    n_moe = _min_cpu_moe(spec, target, partial(make, kv, ngl_moe, ubatch0), g)
                    if n_moe is not None:
                        candidates.append(make(kv, ngl_moe, ubatch0, n_moe))
            if pins.n_gpu_layers is None and pins.cpu_experts is not False:
                # Whole layers to the CPU, with the pinned experts placement (none by default);
                # with every layer's experts in RAM too when even the attention alone is too big.
                moe_options = [pinned_moe or 0]
                if pinned_moe is None and not candidates and spec.layer_expert_bytes:
                    moe_options.append(spec.n_layer)
                for n_moe in moe_options:
                    for kv in partial_pairs:
                        ngl = _max_layers(spec, target, partial(make, kv, ubatch=ubatch0, n_cpu_moe=n_moe), g)
                        if ngl is not None:
                            candidates.append(make(kv, ngl, ubatch0, n_moe))
            best: tuple[SpeedPrediction, Settings] | None = None
            for s in dict.fromkeys(candidates):
                mem, ok, sp = _evaluate(spec, s, target, g)
                tried.append((s, mem, ok))
                if ok and (best is None or _faster(sp, best[0])):
                    best = (sp, s)
            if best:
                chosen = best[1]

    if chosen is not None and pins.n_ubatch is None:
        chosen = _grow_ubatch(spec, target, chosen, pins, g)

    fits = chosen is not None
    if chosen is None:
        chosen = tried[0][0] if tried else make(kv_pairs[0], 0, ubatch0)
        if has_gpu and pins.n_gpu_layers is None and pins.cpu_experts is not False:
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
    chosen = with_context_extension(spec, chosen)
    mem, ok, speed = _evaluate(spec, chosen, target, g)
    fits = fits and ok
    server = server_host(mem.kv, chosen, target.host_ram_bytes - _host_bytes(mem, target))
    chosen = replace(chosen, cache_ram_mib=server.cache_ram_mib, ctx_checkpoints=server.ctx_checkpoints)
    mem = replace(mem, server=server)
    refused = kv_refusal(spec, chosen)
    if refused:
        fits = False
    reasons = plan_reasons(spec, target, pins, chosen, mem, speed, tried, fits, g.is_measured(chosen), refused)
    if server.reason:
        # Before the last reason: that one is the verdict, which callers quote when a plan does
        # not fit ("Does not fit: needs ..."), and a shortage of RAM says "prompt cache off" too.
        reasons[-1:-1] = [f"llama-server: {server.reason}."]
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
    if exact and not g.is_measured(chosen) and chosen.n_ctx > DRY_RUN_MAX_CTX:
        warnings.append(
            f"compute buffer from the formula: llama.cpp is asked for contexts up to "
            f"{format_tokens(DRY_RUN_MAX_CTX)}, since its dry run takes {DRY_RUN_CELL_BYTES} bytes "
            "of RAM a token for the cache's cells"
        )
    if chosen.n_ctx > spec.n_ctx_train > 0:
        warnings.append(
            f"context {format_tokens(chosen.n_ctx)} is beyond the {format_tokens(spec.n_ctx_train)} "
            "the model was trained for: YaRN stretches its positions, and answers past the trained "
            "length are usually worse"
        )
    tools_warning = context_budget(chosen.n_ctx, pins.tools_tokens).warning()
    if tools_warning:
        warnings.append(tools_warning)
    alts = tuple(_alternatives(spec, target, chosen, g, pins)) if alternatives else ()
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


def _faster(a: SpeedPrediction, b: SpeedPrediction) -> bool:
    """`a` beats the earlier candidate `b`: 2% faster decoding, or as fast and a fifth faster
    reading prompts (ties keep the earlier: the more precise cache, experts before layers)."""
    if a.decode_tps > b.decode_tps * 1.02:
        return True
    return a.decode_tps >= b.decode_tps * 0.98 and a.prefill_tps > b.prefill_tps * 1.2


def _min_cpu_moe(spec: ModelSpec, target: Target, build: Callable[[int], Settings], g: GraphEstimate) -> int | None:
    """Fewest leading layers whose routed experts go to RAM for the settings to fit, or None.

    Each layer's experts moved to RAM only shrinks what the devices hold and only grows what the
    host holds, so the counts that fit the devices are one range: find its bottom by bisection
    (7 evaluations for 128 layers, not a dry run each), then check the host there.
    """

    def device_fits(n: int) -> bool:
        return _devices_fit(memory_breakdown(spec, build(n), target, g), target)

    lo, hi = 0, spec.n_layer
    if not device_fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if device_fits(mid):
            hi = mid
        else:
            lo = mid + 1
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


def _alternatives(spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate, pins: Pins) -> Iterable[Alternative]:
    alts = [_alt(spec, target, label, cand, g) for label, cand in neighbours(spec, s, target.has_gpu)]
    placement = _placement_alternatives(spec, target, s, g, pins, {a.settings for a in alts})
    # Beside the experts' own neighbours, which lead the list (alternatives.neighbours).
    lead = sum(1 for a in alts if a.settings.n_cpu_moe != s.n_cpu_moe and a.settings.n_gpu_layers == s.n_gpu_layers)
    return alts[:lead] + placement + alts[lead:]


def _placement_alternatives(
    spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate, pins: Pins, seen: set[Settings]
) -> list[Alternative]:
    """A MoE plan's other way of freeing the GPU, sized by the search: whole layers on the CPU
    (the most that fit, experts with them) beside experts in RAM, or the reverse."""
    if not (target.has_gpu and spec.layer_expert_bytes):
        return []
    max_ngl = spec.n_layer + 1
    out: list[Alternative] = []
    if s.n_gpu_layers >= max_ngl and s.n_cpu_moe:
        ngl = _max_layers(spec, target, lambda n: _with_placement(spec, target, s, g, pins, n, 0), g)
        if ngl is not None and ngl < max_ngl:
            cand = _with_placement(spec, target, s, g, pins, ngl, 0)
            out.append(_alt(spec, target, f"whole layers instead: {ngl} of {max_ngl} on the GPU", cand, g))
    elif s.n_gpu_layers < max_ngl:
        n = _min_cpu_moe(spec, target, lambda k: _with_placement(spec, target, s, g, pins, max_ngl, k), g)
        if n is not None:
            cand = _with_placement(spec, target, s, g, pins, max_ngl, n)
            out.append(_alt(spec, target, f"every attention on the GPU, {experts_label(spec, n)}", cand, g))
    return [a for a in out if a.settings not in seen and a.settings != s]


def _with_placement(
    spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate, pins: Pins, ngl: int, n_cpu_moe: int
) -> Settings:
    """`s` with another placement: -ngl, --n-cpu-moe, the threads that go with them (unless
    pinned) and the split."""
    t, tb = _threads(target, ngl >= spec.n_layer + 1 and n_cpu_moe == 0)
    cand = s.with_(
        n_gpu_layers=ngl,
        n_cpu_moe=n_cpu_moe,
        n_threads=pins.n_threads or t,
        n_threads_batch=pins.n_threads_batch or tb,
    )
    return with_split(spec, target, cand, pins, g)


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
    target = plan_.asked_target or plan_.target  # the machine as asked, before a keep-free pin
    return plan(plan_.spec, target, replace(plan_.pins, **pins), exact=plan_.exact)  # type: ignore[arg-type]  # a dict of Pins fields; mypy cannot match **dict to each field
