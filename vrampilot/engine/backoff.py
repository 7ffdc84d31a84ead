"""What to try when llama.cpp cannot allocate a plan: the cheapest alternative that needs less memory.

Only two kinds of change are allowed, as the user would expect from "it did not fit": fewer GPU
layers or a smaller context. Their cost is what the user loses, as fractions: predicted decode
speed for layers, context length for context. The plan's own alternatives carry both numbers.
Everything else the failed plan chose stays as it was: re-planning freely at the smaller size
would pick a larger KV cache type, and memory would barely drop from one step to the next.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from vrampilot.planner.plan import Alternative, Pins, Plan
from vrampilot.planner.search import replan_with
from vrampilot.planner.settings import Settings
from vrampilot.units import format_tokens

_BACKOFF_FIELDS = ("n_gpu_layers", "n_ctx")
_PINNABLE = tuple(f.name for f in fields(Pins) if f.name in {g.name for g in fields(Settings)})


@dataclass(frozen=True)
class BackoffStep:
    plan: Plan
    change: str  # e.g. "GPU layers 31 -> 30"


def _memory_bytes(plan: Plan) -> int:
    return plan.memory.device.total_bytes if plan.target.has_gpu else plan.memory.host.total_bytes


def _changed(a: Settings, b: Settings) -> set[str]:
    return {f.name for f in fields(Settings) if getattr(a, f.name) != getattr(b, f.name)}


def backoff_cost(plan: Plan, alt: Alternative) -> float:
    """Fraction of speed lost plus fraction of context lost (0 = free)."""
    speed_loss = 0.0
    if plan.speed.decode_tps > 0:
        speed_loss = max(0.0, 1.0 - alt.speed.decode_tps / plan.speed.decode_tps)
    ctx_loss = max(0.0, 1.0 - alt.settings.n_ctx / plan.settings.n_ctx)
    return speed_loss + ctx_loss


def is_backoff(plan: Plan, alt: Alternative) -> bool:
    changed = _changed(plan.settings, alt.settings)
    if not changed or not changed <= set(_BACKOFF_FIELDS):
        return False
    s, t = plan.settings, alt.settings
    return t.n_gpu_layers <= s.n_gpu_layers and t.n_ctx <= s.n_ctx and alt.memory_total_bytes < _memory_bytes(plan)


def describe_change(old: Settings, new: Settings) -> str:
    parts = []
    if new.n_gpu_layers != old.n_gpu_layers:
        parts.append(f"GPU layers {old.n_gpu_layers} -> {new.n_gpu_layers}")
    if new.n_ctx != old.n_ctx:
        parts.append(f"context {format_tokens(old.n_ctx)} -> {format_tokens(new.n_ctx)}")
    for name in sorted(_changed(old, new) - set(_BACKOFF_FIELDS)):
        parts.append(f"{name} {getattr(old, name)} -> {getattr(new, name)}")
    return ", ".join(parts)


def next_backoff(plan: Plan) -> BackoffStep | None:
    """The plan to try after `plan` failed to allocate, or None when nothing smaller is on offer."""
    candidates = [a for a in plan.alternatives if is_backoff(plan, a)]
    if not candidates:
        return None
    best = min(candidates, key=lambda a: (backoff_cost(plan, a), a.memory_total_bytes))
    changed = _changed(plan.settings, best.settings)
    kept = {name: getattr(plan.settings, name) for name in _PINNABLE if name not in changed}
    pins = {**kept, **{name: getattr(best.settings, name) for name in changed}}
    new_plan = replan_with(plan, **pins)
    # The re-plan may re-choose unpinned settings; what was loaded is what the user is told about.
    return BackoffStep(new_plan, describe_change(plan.settings, new_plan.settings))
