"""The verdict on one model for this machine: the planner's plan, reduced to a badge and a speed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vrampilot.gguf import ModelSpec, one_line
from vrampilot.planner.fit import FIT_LABELS, Fit, classify_fit
from vrampilot.units import format_tokens

if TYPE_CHECKING:
    from vrampilot.planner.target import Target

DEFAULT_TARGET_CTX = 8192


def format_tps(tps: float) -> str:
    """'49.4 tok/s'; whole numbers past 100 (a tiny model on a GPU predicts thousands)."""
    return f"{tps:,.0f} tok/s" if tps >= 100 else f"{tps:.1f} tok/s"


@dataclass(frozen=True)
class Badge:
    fit: Fit
    decode_tps: float
    n_ctx: int
    n_gpu_layers: int
    n_layers_total: int  # n_layer + 1: the blocks and the output layer, llama.cpp's -ngl count
    architecture: str
    n_params: int
    kv_type: str
    reason: str  # the planner's last word (why it fits or by how much it does not)

    @property
    def label(self) -> str:
        if self.fit is Fit.PARTIAL:
            return f"{FIT_LABELS[self.fit]} ({self.n_gpu_layers}/{self.n_layers_total} layers)"
        return FIT_LABELS[self.fit]

    @property
    def text(self) -> str:
        if self.fit is Fit.TOO_LARGE:
            return self.label
        return f"{self.label} · {format_tps(self.decode_tps)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "fit": self.fit.value,
            "label": self.label,
            "decode_tps": round(self.decode_tps, 2) if self.fit is not Fit.TOO_LARGE else None,
            "n_ctx": self.n_ctx,
            "n_gpu_layers": self.n_gpu_layers,
            "n_layers_total": self.n_layers_total,
            "architecture": self.architecture,
            "n_params": self.n_params,
            "kv_type": self.kv_type,
            "reason": self.reason,
        }


def badge_for_spec(spec: ModelSpec, target: Target, n_ctx: int = DEFAULT_TARGET_CTX) -> Badge:
    """Plan `spec` on `target` at `n_ctx` (capped at the trained context) and classify the result."""
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan

    ctx = min(n_ctx, spec.n_ctx_train) if spec.n_ctx_train > 0 else n_ctx
    result = plan(spec, target, Pins(n_ctx=ctx), alternatives=False)
    s = result.settings
    total = spec.n_layer + 1
    fit = classify_fit(result)
    kv = s.type_k if s.type_k == s.type_v else f"{s.type_k}/{s.type_v}"
    reason = result.reasons[-1] if result.reasons else ""
    if ctx < n_ctx:
        reason = f"At {format_tokens(ctx)} context, the most this model was trained for. {reason}"
    return Badge(
        fit=fit,
        decode_tps=result.speed.decode_tps,
        n_ctx=ctx,
        n_gpu_layers=s.n_gpu_layers if target.has_gpu else 0,
        n_layers_total=total,
        architecture=one_line(spec.architecture),
        n_params=spec.n_params,
        kv_type=kv,
        reason=reason,
    )
