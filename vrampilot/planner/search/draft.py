"""Speculative decoding in the plan: the draft's own memory, where it goes, how many tokens it
drafts, and the speed-up to expect.

llama-server creates the draft exactly so (common/speculative.cpp, common_base_params_to_speculative
and common_speculative_init_result): the draft model loads with its own -ngld and -devd, and its
context copies the target's parameters but for the cache types (-ctkd/-ctvd), one logit row per
sequence (n_outputs_max = n_parallel), and n_ctx = the target context's actual n_ctx (there is no
flag for the draft's context size). So the draft is one more model with its own Settings
(`draft_settings`) on its own Target (`draft_target`), and the one memory model counts it; tests
hold the result against llama-server's buffer lines for the draft on the CPU and on Vulkan.
Drafting also changes the target: each verify batch asks logits for the sampled token and every
drafted one (Settings.n_outputs_max), which grows its compute buffer a little.

The speed-up follows the usual analysis of speculative sampling (Leviathan et al. 2023): with a
per-token acceptance probability p and n drafted tokens, a verify step yields 1 + p + ... + p^n
tokens and costs n draft steps plus one target pass over n + 1 tokens. That pass is the speed
model's own estimate for a batch of n + 1 (memory-bound on a GPU: about one step; on a CPU with
few threads nearly n + 1 steps, which is why drafting rarely pays there); a draft step is the
draft model's own predicted decode time (n-gram drafting costs nothing). p is learned from this
machine's replies (speed/acceptance.py) and assumed until then, which the plan says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from vrampilot.errors import UserError
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.dry_run.graph import graph_compute
from vrampilot.planner.dry_run.measure import MeasureError, measure_allocations
from vrampilot.planner.errors import PlanError
from vrampilot.planner.memory.breakdown import (
    Components,
    MemoryBreakdown,
    device_label,
    loaded_layer_bytes,
    memory_breakdown,
)
from vrampilot.planner.memory.compute import FORMULA, GRAPH, GraphEstimate, compute_buffer_bytes
from vrampilot.planner.memory.kv import KvBreakdown
from vrampilot.planner.plan import Alternative, DraftPlan, Pins, Plan, without_margin
from vrampilot.planner.search.choose import plan, replan_with
from vrampilot.planner.search.measured_graph import measured_graph
from vrampilot.planner.settings import Settings
from vrampilot.planner.speed_model.predict import SpeedModel, predict_speed
from vrampilot.planner.target import Target
from vrampilot.speed import (
    Acceptance,
    load_acceptance,
    p_from_rate,
    pair_key,
    record_acceptance,
)
from vrampilot.units import format_bytes

MAX_DRAFT_TOKENS = 16  # the planner never drafts more per step (the speed-up flattens well before)
# Priors, until this machine measured the pair (speed/acceptance.py): a small model of the same
# family drafting for a larger one accepts most tokens of ordinary chat (published llama.cpp runs
# report 60-80%); prompt lookup finds a continuation only where the reply repeats the context, and
# is often wrong. A model's own MTP block was trained with it to predict the next token
# (DeepSeek-V3's report: 85-90% of its first drafted tokens accepted); the prior stays a little below.
PRIOR_DRAFT_P = 0.7
PRIOR_NGRAM_P = 0.4
PRIOR_MTP_P = 0.8
NGRAM_MIN_DRAFT = 4  # prompt lookup costs nothing to draft: draft at least this many


@dataclass(frozen=True)
class DraftRequest:
    """What the user asked for: a draft model (path) or n-gram drafting, and what they pinned."""

    kind: str  # "draft", "ngram" or "mtp" (the model's own multi-token-prediction block)
    model_path: Path | None = None
    n_draft: int | None = None  # None: the planner chooses
    on_gpu: bool | None = None  # None: the planner chooses (a draft model only)
    type_k: str = "f16"
    type_v: str = "f16"


def request_from_text(text: str) -> DraftRequest | None:
    """What a user typed for drafting: "" or "off" for none, "ngram", "mtp", or a draft model's path."""
    t = text.strip()
    if not t or t.lower() == "off":
        return None
    if t.lower() in ("ngram", "n-gram"):
        return DraftRequest("ngram")
    if t.lower() == "mtp":
        return DraftRequest("mtp")
    return DraftRequest("draft", Path(t).expanduser())


def draft_settings(settings: Settings) -> Settings:
    """The draft context llama-server creates for `settings` (see the module docstring)."""
    on_gpu = settings.draft_gpu_layers > 0 and settings.draft_device != "none"
    return Settings(
        n_ctx=settings.n_ctx,
        type_k=settings.draft_type_k,
        type_v=settings.draft_type_v,
        n_gpu_layers=settings.draft_gpu_layers if on_gpu else 0,
        n_batch=settings.n_batch,
        n_ubatch=settings.n_ubatch,
        n_threads=settings.n_threads,
        n_threads_batch=settings.n_threads_batch,
        flash_attn=settings.flash_attn,
        swa_full=settings.swa_full,
        n_seq=settings.n_seq,
        devices=(settings.draft_device,) if on_gpu and settings.draft_device else (),
    )


def draft_target(target: Target, settings: Settings) -> Target:
    """The target's devices the draft may use: the one -devd names (the first device when it names
    none), or none at all when its layers stay on the CPU."""
    if not target.has_gpu or settings.draft_gpu_layers <= 0 or settings.draft_device == "none":
        return replace(target, gpus=())
    named = [g for g in target.gpus if g.llama_name == settings.draft_device]
    return replace(target, gpus=(named[0] if named else target.gpus[0],))


def draft_memory(
    draft: ModelSpec, settings: Settings, target: Target, graph: GraphEstimate = FORMULA
) -> MemoryBreakdown:
    """The draft model's memory per device for the plan's `settings` (llama.cpp's own draft context)."""
    return memory_breakdown(draft, draft_settings(settings), draft_target(target, settings), graph)


def draft_graph(draft: ModelSpec, settings: Settings, target: Target) -> GraphEstimate:
    """The draft's compute buffers as llama.cpp reserves them (a no_alloc dry run of the draft with
    its own settings on its own devices); the formula when llama.cpp cannot be asked."""
    ds = draft_settings(settings)
    if settings.draft_device == "none" and target.devices_here:
        # -devd none: llama-server gives the draft no device at all, so its scheduler has no
        # device to send large matmuls to (a dry run with this machine's default devices would).
        m = graph_compute(draft.path, ds, ())
        if m is None or m.refused:
            return FORMULA
        return FORMULA.learn(ds, {GRAPH: m.total_bytes}, FORMULA.graph_bytes(draft, ds))
    return measured_graph(draft, draft_target(target, settings), ds, FORMULA) or FORMULA


def mtp_refusal(spec: ModelSpec) -> str | None:
    """Why `spec` cannot draft with its own MTP block, in one line (None: it can). llama.cpp
    refuses an MTP context for a model without MTP layers (llama_init_from_model), and the
    block's weights must be in the file (the spec drops layers whose tensors it lacks)."""
    if spec.n_layer_nextn > 0:
        return None
    return (
        f"{spec.path.name} has no multi-token-prediction (MTP) block to draft with "
        "(its header sets no nextn_predict_layers): use a draft model or ngram"
    )


def mtp_memory(
    spec: ModelSpec, settings: Settings, target: Target, mem: MemoryBreakdown, exact: bool
) -> MemoryBreakdown:
    """The MTP draft context's own buffers: its compute buffer and its output buffer, where
    llama.cpp puts them. The MTP block's weights and the draft context's cache are the model's
    (memory_breakdown loads the block, kv.py's "mtp draft" part), so `mem` holds those already.

    The context runs the MTP block's graph (LLM_GRAPH_TYPE_DECODER_MTP), whose compute buffers an
    exact plan asks of llama.cpp with a dry run of the MTP context (on the CPU, or on the plan's
    devices when this machine has them); otherwise the formula of the model's own graph for the
    same settings stands in: an upper bound, the MTP graph being one block and the output head
    (planned 9.91 MiB for 8.86 MiB on the CPU, 12.9 MiB for 8.5 MiB on a Vulkan device)."""
    ctx = settings.mtp_context()
    output = FORMULA.output_bytes(spec, ctx)
    empty_kv = KvBreakdown(0, 0, 0, 0, 0, 0, 0, 0, 0, (0,) * spec.n_layer)  # the cache is the model's
    mtp_device = mem.layer_devices[spec.n_layer - 1] if mem.layer_devices and mem.per_device else -1
    measured = _mtp_compute(spec, settings, target, mtp_device >= 0) if exact else None
    if mtp_device < 0:
        compute = sum(measured.values()) if measured else FORMULA.graph_bytes(spec, ctx)
        host = Components(compute_bytes=compute, output_bytes=output)
        return MemoryBreakdown(Components(), host, empty_kv, (False,) * spec.n_layer, False)
    label = device_label(target, mtp_device)
    if measured and label in measured:
        on_device = measured[label]
        host_compute = sum(b for name, b in measured.items() if name != label)
    else:
        on_device = compute_buffer_bytes(spec, ctx, device="gpu", label=label)
        host_compute = compute_buffer_bytes(spec, ctx, device="host")
    per_device = tuple(
        Components(compute_bytes=on_device if i == mtp_device else 0) for i in range(len(mem.per_device))
    )
    host = Components(compute_bytes=host_compute, output_bytes=output)
    return MemoryBreakdown(
        per_device[mtp_device], host, empty_kv, mem.gpu_layers, mem.output_on_gpu, per_device=per_device
    )


def _mtp_compute(spec: ModelSpec, settings: Settings, target: Target, offloaded: bool) -> dict[str, int] | None:
    """The MTP context's compute buffers by llama.cpp's buffer name, from a no_alloc dry run of
    the model and its MTP context; None where llama.cpp cannot be asked for this plan (its devices
    are not this machine's, or it names devices or RPC hosts the dry run would not use)."""
    if offloaded and (not target.devices_here or settings.devices or settings.uses_rpc):
        return None
    try:
        m = measure_allocations(spec.path, settings if offloaded else settings.with_(n_gpu_layers=0), dry_run=True)
    except (MeasureError, UserError):
        return None
    if m.draft is None or m.draft.refused is not None or not m.draft.compute_bytes:
        return None
    return dict(m.draft.compute_bytes)


def mtp_draft_seconds(spec: ModelSpec, settings: Settings, t_target_s: float) -> float:
    """One MTP draft step, in the model's own decode time: the step reads the MTP block and the
    output head instead of every layer and the head (decoding is memory-bound), so it costs the
    share of the weights read per token that those hold."""
    layers = loaded_layer_bytes(spec, settings)
    first_mtp = spec.n_layer - spec.n_layer_nextn
    head = spec.output_bytes or spec.token_embd_bytes  # a tied head reads the token embedding
    mtp = sum(layers[first_mtp:]) + head
    model = sum(layers[:first_mtp]) + head
    return t_target_s * mtp / model if model > 0 else 0.0


# -- speed-up ---------------------------------------------------------------------------------


def tokens_per_step(p: float, n: int) -> float:
    """Expected tokens a verify step yields: the sampled one plus the accepted run of n drafts."""
    return sum(p**i for i in range(n + 1))


def predicted_speedup(p: float, n: int, t_target_s: float, t_draft_s: float, t_verify_s: float) -> float:
    """Decode speed with drafting over without: tokens per step over the step's cost (n draft
    steps and one target pass over the n + 1 tokens, `t_verify_s`) in target decode steps."""
    if n <= 0 or t_target_s <= 0:
        return 1.0
    step_s = n * t_draft_s + max(t_verify_s, t_target_s)
    return tokens_per_step(p, n) * t_target_s / step_s


def best_n_draft(
    p: float, t_target_s: float, t_draft_s: float, verify_s: Callable[[int], float], floor: int = 1
) -> int:
    """The draft length with the highest predicted speed-up (ties: the shorter); `verify_s(n)`:
    the target's pass over n + 1 tokens."""
    best, best_s = floor, -1.0
    for n in range(floor, MAX_DRAFT_TOKENS + 1):
        s = predicted_speedup(p, n, t_target_s, t_draft_s, verify_s(n))
        if s > best_s + 1e-9:
            best, best_s = n, s
    return best


# -- the plan ---------------------------------------------------------------------------------


def plan_with_draft(
    spec: ModelSpec,
    target: Target,
    pins: Pins | None,
    request: DraftRequest,
    *,
    acceptance: Acceptance | None = None,
    exact: bool = False,
    alternatives: bool = True,
) -> Plan:
    """A plan for `spec` that drafts as `request` asks: the draft's memory is set aside on its
    device before the target is planned, so the two fit together; with a GPU the draft goes where
    the predicted decode speed with drafting is higher (on the GPU beside the target, or on the
    CPU leaving the GPU to the target's layers and context).

    Raises PlanError when the draft model cannot draft for `spec` (llama.cpp's vocabulary rule,
    asked before anything loads) or is not a model file llama.cpp reads."""
    pins = pins or Pins()
    if request.kind == "mtp":
        why = mtp_refusal(spec)
        if why is not None:
            raise PlanError(why)
    dspec = _draft_spec(spec, request)
    if acceptance is None:
        acceptance = prior_acceptance(request.kind)
    base = plan(spec, target, pins, alternatives=False, exact=exact)
    choices = [False] if dspec is None or not target.has_gpu else [True, False]
    if request.on_gpu is not None and dspec is not None:
        if request.on_gpu and not target.has_gpu:
            raise PlanError("the draft cannot go on a GPU: this target has none")
        choices = [request.on_gpu]
    best: Plan | None = None
    for on_gpu in choices:
        candidate = _plan_placed(spec, target, pins, request, dspec, base, on_gpu, acceptance, exact, alternatives)
        if best is None or _better(candidate, best):
            best = candidate
    assert best is not None
    return best


def _better(a: Plan, b: Plan) -> bool:
    if a.fits != b.fits:
        return a.fits
    return _drafting_tps(a) > _drafting_tps(b)


def _drafting_tps(p: Plan) -> float:
    return p.draft.decode_tps if p.draft is not None else p.speed.decode_tps


def _draft_spec(spec: ModelSpec, request: DraftRequest) -> ModelSpec | None:
    if request.kind in ("ngram", "mtp"):
        return None
    if request.kind != "draft" or request.model_path is None:
        raise PlanError(f"unknown drafting {request.kind!r}: a draft model's path, or n-gram drafting")
    from vrampilot.llamacpp import draft_refusal

    try:
        dspec = load_model_spec(request.model_path)
    except UserError as exc:
        raise PlanError(f"draft model: {exc}") from None
    why = draft_refusal(spec.path, request.model_path)
    if why is not None:
        raise PlanError(why)
    return dspec


def _with_draft(
    s: Settings, request: DraftRequest, dspec: ModelSpec | None, n: int, on_gpu: bool, dev: str
) -> Settings:
    if request.kind == "mtp":
        return s.with_(
            spec_type="mtp", draft_n_max=n, draft_n_min=0, draft_type_k=request.type_k, draft_type_v=request.type_v
        )
    if dspec is None:
        return s.with_(spec_type="ngram", draft_n_max=n)
    return s.with_(
        spec_type="draft",
        draft_model=str(request.model_path),
        draft_n_max=n,
        draft_n_min=0,
        draft_gpu_layers=dspec.n_layer + 1 if on_gpu else 0,
        draft_device=dev,
        draft_type_k=request.type_k,
        draft_type_v=request.type_v,
    )


def _plan_placed(
    spec: ModelSpec,
    target: Target,
    pins: Pins,
    request: DraftRequest,
    dspec: ModelSpec | None,
    base: Plan,
    on_gpu: bool,
    acceptance: Acceptance,
    exact: bool,
    alternatives: bool,
) -> Plan:
    # The draft's device: the one that holds the target's output layer (where the verify batch
    # ends), by llama.cpp's name; "none" keeps it off every device when the target has GPUs.
    gpu_pos = max(base.memory.output_device, 0)
    dev = ""
    if on_gpu:
        g = target.gpus[gpu_pos]
        dev = (g.llama_name or "") if len(target.gpus) > 1 or base.settings.devices else ""
    elif target.has_gpu:
        dev = "none"
    n_guess = request.n_draft or 4
    first = _with_draft(base.settings, request, dspec, n_guess, on_gpu, dev)
    # Set the draft's bytes (and the target's larger compute buffer) aside, then plan the target
    # in what is left; the context it then chooses can only be shorter, so the draft's cache,
    # sized by that context, fits in what was set aside.
    extra = _extra_compute(spec, base.settings, first, target, base)
    reduced = target
    if dspec is not None:
        dm = draft_memory(dspec, first, target)
        host_take = dm.host.total_bytes
        if on_gpu:
            per_dev = without_margin(dm.per_device[0]) if dm.per_device else 0
            gpus = list(target.gpus)
            gpus[gpu_pos] = replace(
                gpus[gpu_pos], memory_budget_bytes=max(0, gpus[gpu_pos].memory_budget_bytes - per_dev - extra)
            )
            reduced = replace(reduced, gpus=tuple(gpus))
            extra = 0
        reduced = replace(reduced, host_ram_bytes=max(0, reduced.host_ram_bytes - host_take - extra))
    elif request.kind == "mtp":
        # The MTP block's weights and its context's cache, compute and output buffers, set aside
        # where the block goes: the last layer's device (-ngl offloads it first), else the host.
        plain_mem = memory_breakdown(spec, base.settings, target, base.graph)
        with_mtp = memory_breakdown(spec, first, target, base.graph)
        dm = mtp_memory(spec, first, target, with_mtp, exact=False)
        reduced = _set_aside(target, plain_mem, with_mtp, dm)
    elif extra:
        reduced = replace(target, host_ram_bytes=max(0, target.host_ram_bytes - extra))
    p2 = plan(spec, reduced, pins, alternatives=alternatives, exact=exact)
    # From here on: the machine as the model was planned on it (a keep-free pin's margins
    # applied), with its whole budgets again, the draft's part included.
    asked = target if p2.asked_target is not None else None
    target = replace(
        p2.target,
        host_ram_bytes=target.host_ram_bytes,
        gpus=tuple(
            replace(g, memory_budget_bytes=o.memory_budget_bytes)
            for g, o in zip(p2.target.gpus, target.gpus, strict=True)
        ),
    )
    plain = p2.settings
    mem_plain = memory_breakdown(spec, plain, target, p2.graph)
    speed_plain = predict_speed(spec, plain, target, mem_plain)
    t_target = 1.0 / speed_plain.decode_tps if speed_plain.decode_tps > 0 else 0.0
    # The verify pass over n + 1 tokens, by the speed model's own small-batch estimate, in units
    # of its single-token step (so what replies taught the step applies to it as well).
    model = SpeedModel(spec, plain, target, mem_plain)
    t_step = model.decode_seconds(1)

    def verify_s(n: int) -> float:
        return t_target * model.prefill_seconds(n + 1, 1) / t_step if t_step > 0 else t_target

    draft_tps = 0.0
    t_draft = 0.0
    if dspec is not None:
        probe = _with_draft(plain, request, dspec, n_guess, on_gpu, dev)
        probe_mem = draft_memory(dspec, probe, target)
        draft_tps = predict_speed(dspec, draft_settings(probe), draft_target(target, probe), probe_mem).decode_tps
        t_draft = 1.0 / draft_tps if draft_tps > 0 else 0.0
    if request.kind == "mtp":
        t_draft = mtp_draft_seconds(spec, _with_draft(plain, request, dspec, n_guess, on_gpu, dev), t_target)
        draft_tps = 1.0 / t_draft if t_draft > 0 else 0.0
    floor = NGRAM_MIN_DRAFT if request.kind == "ngram" else 1
    n = request.n_draft or best_n_draft(acceptance.p, t_target, t_draft, verify_s, floor)
    final = _with_draft(plain, request, dspec, n, on_gpu, dev)
    graph = p2.graph
    if exact and not graph.is_measured(final):
        # The verify batch's logit rows are part of the graph llama.cpp reserves: ask it again.
        graph = measured_graph(spec, target, final, graph) or graph
    mem = memory_breakdown(spec, final, target, graph)
    speed = predict_speed(spec, final, target, mem)
    dmem: MemoryBreakdown | None = None
    if dspec is not None:
        dmem = draft_memory(dspec, final, target, draft_graph(dspec, final, target) if exact else FORMULA)
    elif request.kind == "mtp":
        dmem = mtp_memory(spec, final, target, mem, exact)
    # What replies measured of drafting's own speed against this arithmetic corrects it.
    speedup = predicted_speedup(acceptance.p, n, t_target, t_draft, verify_s(n)) * acceptance.speed_factor
    fits = p2.fits and _fits_together(mem, dmem, final, target)
    dplan = DraftPlan(
        kind=request.kind,
        n_draft=n,
        acceptance=acceptance,
        speedup=speedup,
        decode_tps=speed_plain.decode_tps * speedup,
        draft_tps=draft_tps,
        spec=dspec,
        settings=draft_settings(final) if dspec is not None else (final.mtp_context() if dmem is not None else None),
        memory=dmem,
        device=_draft_device(request, dspec, target, gpu_pos, on_gpu, mem),
        extra_target_compute_bytes=_extra_compute(spec, plain, final, target, p2),
        t_target_s=t_target,
        t_draft_s=t_draft,
        t_verify_s=verify_s(n),
        device_names=tuple(
            g.buffer_name or g.llama_name or g.name
            for g in (draft_target(target, final).gpus if dspec is not None else target.gpus)
        )
        if dmem is not None
        else (),
    )
    reasons = list(p2.reasons) + draft_reasons(dplan, speed_plain.decode_tps)
    warnings = list(p2.warnings)
    if speedup < 1.0:
        warnings.append(
            f"drafting is predicted to slow decoding ({speedup:.2f}x): the draft costs more than its "
            "accepted tokens save (a draft should be several times faster than the model)"
        )

    # The alternatives draft as the plan does (a back-off changes the context or layers, never
    # the drafting), their memory counted with it.
    def drafting(a: Alternative) -> Alternative:
        settings = _with_draft(a.settings, request, dspec, n, on_gpu, dev)
        return replace(a, settings=settings, memory=memory_breakdown(spec, settings, target, graph))

    alts = tuple(drafting(a) for a in p2.alternatives)
    return replace(
        p2,
        alternatives=alts,
        target=target,
        asked_target=asked,
        settings=final,
        memory=mem,
        speed=speed,
        fits=fits,
        draft=dplan,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        graph=graph,
    )


def _draft_device(
    request: DraftRequest, dspec: ModelSpec | None, target: Target, gpu_pos: int, on_gpu: bool, mem: MemoryBreakdown
) -> str:
    if request.kind == "mtp":
        where = mem.layer_devices[-1] if mem.layer_devices else -1
        return target.gpus[where].label if where >= 0 and target.has_gpu else "CPU"
    if dspec is None:
        return "none (n-gram lookup)"
    return target.gpus[gpu_pos].label if on_gpu else "CPU"


def _set_aside(target: Target, plain: MemoryBreakdown, drafting: MemoryBreakdown, dm: MemoryBreakdown) -> Target:
    """`target` less what MTP drafting adds to `plain`: per device and on the host."""
    gpus = list(target.gpus)
    for i, (a, b) in enumerate(zip(plain.per_device, drafting.per_device, strict=False)):
        more = max(0, b.total_bytes - a.total_bytes) + (without_margin(dm.per_device[i]) if dm.per_device else 0)
        gpus[i] = replace(gpus[i], memory_budget_bytes=max(0, gpus[i].memory_budget_bytes - more))
    host = max(0, drafting.host.total_bytes - plain.host.total_bytes) + dm.host.total_bytes
    return replace(target, gpus=tuple(gpus), host_ram_bytes=max(0, target.host_ram_bytes - host))


def _extra_compute(spec: ModelSpec, plain: Settings, drafting: Settings, target: Target, p: Plan) -> int:
    """How much the verify batch's logit rows grow the target's compute buffers, summed."""
    a = memory_breakdown(spec, plain, target, p.graph)
    b = memory_breakdown(spec, drafting, target, p.graph)
    return max(0, (b.device.compute_bytes + b.host.compute_bytes) - (a.device.compute_bytes + a.host.compute_bytes))


def _fits_together(mem: MemoryBreakdown, dmem: MemoryBreakdown | None, s: Settings, target: Target) -> bool:
    host = mem.host.total_bytes + (dmem.host.total_bytes if dmem is not None else 0)
    if host > target.host_ram_bytes:
        return False
    if dmem is None or not dmem.per_device:
        return all(c.total_bytes <= g.memory_budget_bytes for c, g in zip(mem.per_device, target.gpus, strict=False))
    if s.drafts_mtp:  # the MTP context's buffers, per device of the model's own
        return all(
            c.total_bytes + without_margin(d) <= g.memory_budget_bytes
            for c, d, g in zip(mem.per_device, dmem.per_device, target.gpus, strict=False)
        )
    dt = draft_target(target, s)
    where = target.gpus.index(dt.gpus[0])
    for i, (c, g) in enumerate(zip(mem.per_device, target.gpus, strict=False)):
        used = c.total_bytes + (without_margin(dmem.per_device[0]) if i == where else 0)
        if used > g.memory_budget_bytes:
            return False
    return True


def draft_reasons(d: DraftPlan, plain_tps: float) -> list[str]:
    """What the plan says about its draft, one line each."""
    acc = d.acceptance
    source = (
        f"measured over {acc.replies} replies here"
        + (f", speed corrected by {acc.speed_factor:.2f} from them" if acc.speed_factor != 1.0 else "")
        if acc.measured
        else "assumed until replies measure it on this machine"
    )
    lines = []
    if d.spec is not None:
        where = ", ".join(f"{name} {format_bytes(b)}" for name, b in d.bytes_by_device().items())
        lines.append(
            f"Draft {d.spec.path.name} on {d.device}: {where} (weights, its own KV cache at the same "
            f"context, compute); it drafts at {d.draft_tps:.0f} tok/s"
        )
    elif d.kind == "mtp":
        where = ", ".join(f"{name} {format_bytes(b)}" for name, b in d.bytes_by_device().items())
        lines.append(
            f"MTP drafting with the model's own multi-token-prediction block on {d.device}: its weights and "
            f"cache are in the model's bars (\"mtp draft\"), its context's compute and output {where}; "
            f"it drafts at about {d.draft_tps:.0f} tok/s"
        )
    else:
        lines.append("N-gram drafting: tokens proposed from the context itself, no draft model and no memory")
    lines.append(
        f"Drafts {d.n_draft} token{'s' if d.n_draft != 1 else ''} per step: acceptance {acc.p:.0%} per token ({source}) predicts "
        f"{d.speedup:.2f}x decoding, {plain_tps:.1f} -> {d.decode_tps:.1f} tok/s"
    )
    return lines


# -- learning -----------------------------------------------------------------------------------


def acceptance_key(model_path: str | Path, kind: str, draft_path: str | Path | None) -> str:
    return pair_key(str(model_path), str(draft_path) if kind == "draft" and draft_path else kind)


def stored_acceptance(model_path: str | Path, request: DraftRequest, folder: Path | None = None) -> Acceptance:
    """What this machine's replies taught for this pair (the prior until one did)."""
    measured = load_acceptance(acceptance_key(model_path, request.kind, request.model_path), folder)
    return measured or prior_acceptance(request.kind)


def prior_acceptance(kind: str) -> Acceptance:
    """The acceptance assumed for a pair of `kind` ("draft", "ngram", "mtp") nothing measured yet."""
    return Acceptance({"ngram": PRIOR_NGRAM_P, "mtp": PRIOR_MTP_P}.get(kind, PRIOR_DRAFT_P))


def learn_acceptance(
    plan_: Plan, drafted: int, accepted: int, folder: Path | None = None, *, decode_tps: float = 0.0
) -> Acceptance | None:
    """Keep one reply's drafting for the plan's pair; the pair's new figure (None: nothing drafted).
    `decode_tps`: the reply's measured decode speed, against the plan's prediction with drafting.

    A drafted reply teaches the acceptance only, never the speed model: its decode speed is the
    drafting's, not the plan's own (planner/calibration.py would learn a wrong factor from it)."""
    s = plan_.settings
    if not s.drafting:
        return None
    key = acceptance_key(plan_.spec.path, s.spec_type, s.draft_model)
    ratio = 0.0
    d = plan_.draft
    if d is not None and d.t_target_s > 0 and decode_tps > 0 and drafted > 0:
        # The arithmetic with this reply's own acceptance, without the factor the plan applied:
        # what it misses is what the factor learns (not the acceptance, learned above).
        p = p_from_rate(accepted / drafted, s.draft_n_max)
        arithmetic = predicted_speedup(p, s.draft_n_max, d.t_target_s, d.t_draft_s, d.t_verify_s) / d.t_target_s
        ratio = decode_tps / arithmetic if arithmetic > 0 else 0.0
    return record_acceptance(key, s.draft_n_max, drafted, accepted, folder, speed_ratio=ratio)


def replan_keeping_draft(plan_: Plan, **pins: object) -> Plan:
    """choose.replan_with for a plan that may draft: the same request with more pins,
    drafting as it did (same draft, same tokens per step and placement, the acceptance it had)."""
    s, d = plan_.settings, plan_.draft
    if d is None or not s.drafting:
        return replan_with(plan_, **pins)
    request = DraftRequest(
        kind=s.spec_type,
        model_path=Path(s.draft_model) if s.spec_type == "draft" else None,
        n_draft=s.draft_n_max,
        on_gpu=(s.draft_gpu_layers > 0 and s.draft_device != "none")
        if s.spec_type == "draft" and plan_.target.has_gpu
        else None,
        type_k=s.draft_type_k,
        type_v=s.draft_type_v,
    )
    more = replace(plan_.pins, **pins)  # type: ignore[arg-type]  # a dict of Pins fields; mypy cannot match **dict to each field
    target = plan_.asked_target or plan_.target  # the machine as asked, before a keep-free pin
    return plan_with_draft(plan_.spec, target, more, request, acceptance=d.acceptance, exact=plan_.exact)
