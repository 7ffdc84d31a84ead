"""Alternatives to a plan: the neighbours it offers, what to give up first for a smaller one, and
the pins that a change makes.

Three callers want another plan, and each gives up things in its own order, on purpose:
- The search lists the plan's neighbours in both directions (more or less context, another KV
  cache type, a GPU layer more or less, a MoE file's experts of more or fewer layers in RAM or
  whole layers instead, another ubatch, flash attention off) for the user to pick
  (`neighbours`); the search then prices each one.
- The back-off after a failed allocation (engine/backoff.py) gives up only GPU layers, context or
  (MoE) experts kept on the GPU,
  whichever of the plan's alternatives costs less (speed lost plus context lost), and keeps the
  cache type and batch sizes (docs/data.md): re-planning freely at the smaller size would pick a
  larger KV cache type, and memory would barely drop from one step to the next (`cheapest_smaller`).
- The spill advice (meters/spill.py) must free a known number of bytes: a q8_0 KV cache first
  (~0.1% perplexity, planner.md), then a MoE plan's experts of more layers in RAM, then half the
  context down to 4096, fewer layers last, since each
  layer on the CPU costs far more speed than its share (`freeing_changes`).
Whichever applies, the window pins what changed (`changed_pins`) and says so (`describe_change`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import fields, replace

from vrampilot.gguf import ModelSpec
from vrampilot.planner.plan import FULL_PRECISION_KV, MIN_CTX, PREFERRED_KV, Alternative, Pins, Plan
from vrampilot.planner.settings import QUANTIZED_KV_TYPES, Settings
from vrampilot.units import format_tokens

# The settings a user can pin (Pins' fields that are also Settings' fields).
PINNABLE = tuple(f.name for f in fields(Pins) if f.name in {g.name for g in fields(Settings)})
# What a back-off may change (fewer GPU layers, less context, more layers' experts in RAM);
# everything else the failed plan chose stays.
BACKOFF_FIELDS = ("n_gpu_layers", "n_ctx", "n_cpu_moe")
# The settings that decide VRAM, held by a spill re-plan so that the planner does not spend what
# the change frees on a larger ubatch or more layers.
VRAM_FIELDS = ("n_ctx", "n_gpu_layers", "n_ubatch", "n_batch", "n_cpu_moe")
# llama.cpp's own --fit does not go below this context; neither do the spill suggestions.
MIN_SUGGESTED_CTX = 4096


# The plan's neighbours
def neighbours(spec: ModelSpec, s: Settings, has_gpu: bool) -> list[tuple[str, Settings]]:
    """The alternatives the plan lists, labelled, in the order shown, each once and none equal to `s`."""
    seen = {s}
    out: list[tuple[str, Settings]] = []

    def emit(label: str, cand: Settings) -> None:
        if cand not in seen:
            seen.add(cand)
            out.append((label, cand))

    if has_gpu and spec.layer_expert_bytes and s.n_gpu_layers > spec.n_layer:
        # A MoE plan's main choice first: its experts' placement, more of them in RAM (room
        # for context or a larger cache) or fewer (faster, if it fits); the search adds whole
        # layers on the CPU after these, sized by itself.
        step = moe_step(spec)
        if s.n_cpu_moe < spec.n_layer:
            n = min(spec.n_layer, s.n_cpu_moe + step)
            emit(experts_label(spec, n), s.with_(n_cpu_moe=n))
        if s.n_cpu_moe > 0:
            emit(experts_label(spec, s.n_cpu_moe - 1), s.with_(n_cpu_moe=s.n_cpu_moe - 1))
    up = next_ctx(s.n_ctx, up=True)
    down = next_ctx(s.n_ctx, up=False)
    emit(f"{format_tokens(up)} context", s.with_(n_ctx=up))
    if down >= MIN_CTX:
        emit(f"{format_tokens(down)} context", s.with_(n_ctx=down))
    for t in PREFERRED_KV:
        if (t, t) != (s.type_k, s.type_v):
            emit(f"{t} KV cache", s.with_(type_k=t, type_v=t, flash_attn=True))
            if t != "f16":
                emit(f"{format_tokens(up)} context with {t} KV", s.with_(n_ctx=up, type_k=t, type_v=t))
    if has_gpu:
        if s.n_gpu_layers > 0:
            emit("one fewer GPU layer", s.with_(n_gpu_layers=s.n_gpu_layers - 1))
        if s.n_gpu_layers < spec.n_layer + 1:
            emit("all layers on the GPU", s.with_(n_gpu_layers=spec.n_layer + 1))
    if s.n_ubatch > 128:
        emit(f"ubatch {s.n_ubatch // 2}", s.with_(n_ubatch=s.n_ubatch // 2))
    if s.n_ubatch < 2048:
        ub = s.n_ubatch * 2
        emit(f"ubatch {ub}", s.with_(n_ubatch=ub, n_batch=max(s.n_batch, ub)))
    if s.flash_attn and s.type_v not in QUANTIZED_KV_TYPES:
        emit("flash attention off", s.with_(flash_attn=False))
    return out


def moe_step(spec: ModelSpec) -> int:
    """Layers of experts an alternative moves at once: about a twelfth of the model (4 of 48)."""
    return max(1, round(spec.n_layer / 12))


def experts_label(spec: ModelSpec, n_cpu_moe: int) -> str:
    """An alternative's label for experts of n_cpu_moe layers in RAM (every attention on the GPU)."""
    if n_cpu_moe <= 0:
        return "no experts in RAM"
    return f"experts of {min(n_cpu_moe, spec.n_layer)} of {spec.n_layer} layers in RAM"


def next_ctx(n: int, up: bool) -> int:
    """The next power of two above `n`, or the one below (`n` itself rounded down when it is none)."""
    p: int = 2 ** math.floor(math.log2(max(n, 1)))
    if up:
        return p * 2
    return p // 2 if p == n else p


# A smaller plan after a failed allocation
def _memory_bytes(plan: Plan) -> int:
    return plan.memory.device.total_bytes if plan.target.has_gpu else plan.memory.host.total_bytes


def backoff_cost(plan: Plan, alt: Alternative) -> float:
    """Fraction of speed lost plus fraction of context lost (0 = free)."""
    speed_loss = 0.0
    if plan.speed.decode_tps > 0:
        speed_loss = max(0.0, 1.0 - alt.speed.decode_tps / plan.speed.decode_tps)
    ctx_loss = max(0.0, 1.0 - alt.settings.n_ctx / plan.settings.n_ctx)
    return speed_loss + ctx_loss


def is_backoff(plan: Plan, alt: Alternative) -> bool:
    """Fewer GPU layers or less context (nothing else changed) that needs less memory."""
    changed = changed_settings(plan.settings, alt.settings)
    if not changed or not changed <= set(BACKOFF_FIELDS):
        return False
    s, t = plan.settings, alt.settings
    return (
        t.n_gpu_layers <= s.n_gpu_layers
        and t.n_ctx <= s.n_ctx
        and t.n_cpu_moe >= s.n_cpu_moe
        and alt.memory_total_bytes < _memory_bytes(plan)
    )


def cheapest_smaller(plan: Plan) -> Alternative | None:
    """The plan's alternative that gives up least (ties: the smaller one), or None."""
    candidates = [a for a in plan.alternatives if is_backoff(plan, a)]
    if not candidates:
        return None
    return min(candidates, key=lambda a: (backoff_cost(plan, a), a.memory_total_bytes))


# Freeing a known number of bytes
def freeing_changes(s: Settings, moe_layers: int = 0) -> Iterator[tuple[str, dict[str, object]]]:
    """The changes that free VRAM, labelled, least costly first: q8_0 KV, then (a mixture of
    experts on the GPU: `moe_layers`, its layer count) the experts of one more layer at a time in
    RAM, then less context (each with q8_0 KV first), then one GPU layer fewer at a time."""
    kv_changes: dict[str, object] = {}
    if s.type_k in FULL_PRECISION_KV or s.type_v in FULL_PRECISION_KV:
        # q8_0 costs ~0.1% perplexity (planner.md) and needs flash attention for the V cache.
        kv_changes = {"type_k": "q8_0", "type_v": "q8_0", "flash_attn": True}
        yield "q8_0 KV cache", kv_changes
    # A layer's experts in RAM cost a few percent of the speed and nothing of the context; whole
    # layers on the CPU cost far more speed than their share (the offload cliff).
    if moe_layers and s.n_gpu_layers > moe_layers:
        for n in range(s.n_cpu_moe + 1, min(moe_layers, s.n_cpu_moe + 8) + 1):
            yield f"experts of {n} layers in RAM (--n-cpu-moe {n})", {"n_cpu_moe": n}
    ctx = s.n_ctx // 2
    while ctx >= MIN_SUGGESTED_CTX:
        if kv_changes:
            yield f"q8_0 KV cache, {format_tokens(ctx)} context", {**kv_changes, "n_ctx": ctx}
        yield f"{format_tokens(ctx)} context", {"n_ctx": ctx}
        ctx //= 2
    for ngl in range(s.n_gpu_layers - 1, 0, -1):
        moved = s.n_gpu_layers - ngl
        yield f"{moved} fewer GPU layer{'s' if moved > 1 else ''} ({ngl} on the GPU)", {"n_gpu_layers": ngl}


# The pins a change makes, and what it changed
def changed_settings(a: Settings, b: Settings) -> set[str]:
    return {f.name for f in fields(Settings) if getattr(a, f.name) != getattr(b, f.name)}


def changed_pins(old: Settings, new: Settings) -> dict[str, object]:
    """The pins that turn settings `old` into `new` (an alternative chosen, a back-off applied)."""
    return {name: getattr(new, name) for name in PINNABLE if getattr(old, name) != getattr(new, name)}


def held_pins(pins: Pins, s: Settings, hold: Iterable[str], changes: Mapping[str, object]) -> Pins:
    """`pins` with `s`'s values of `hold` pinned, then `changes`. No experts in RAM is not held:
    the planner cannot keep fewer there, and a file without experts has nothing to pin."""
    held = {name: getattr(s, name) for name in hold if not (name == "n_cpu_moe" and not s.n_cpu_moe)}
    return replace(pins, **{**held, **changes})


def describe_change(old: Settings, new: Settings) -> str:
    """What changed from `old` to `new`, for the user: "GPU layers 31 -> 30, context 32K -> 16K"."""
    parts = []
    if new.n_gpu_layers != old.n_gpu_layers:
        parts.append(f"GPU layers {old.n_gpu_layers} -> {new.n_gpu_layers}")
    if new.n_ctx != old.n_ctx:
        parts.append(f"context {format_tokens(old.n_ctx)} -> {format_tokens(new.n_ctx)}")
    if new.n_cpu_moe != old.n_cpu_moe:
        parts.append(f"layers with experts in RAM {old.n_cpu_moe} -> {new.n_cpu_moe}")
    for name in sorted(changed_settings(old, new) - set(BACKOFF_FIELDS)):
        parts.append(f"{name} {getattr(old, name)} -> {getattr(new, name)}")
    return ", ".join(parts)
