"""The plan's explanation, decided once for every front end: why (the reasons, the warnings, what
would fit instead), the headline figures, the last measured reply and the alternatives with their
verdicts, as plain values. The CLI (commands/plan_report.py) writes them as text and the window
(ui/plan_view.py) as HTML and a table; each keeps only its medium, neither decides what is said.
"""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.planner.calibration import last_reply_for
from vrampilot.planner.families import COUNTED_BY_LLAMA_CPP
from vrampilot.planner.plan import Plan
from vrampilot.planner.speed_model.predict import HEADLINE_PROMPT_TOKENS, SpeedPrediction
from vrampilot.speed import LastReply

REASON, WARNING, SUGGESTION = "reason", "warning", "suggestion"
FITS, REFUSED, TOO_BIG = "fits", "refused", "too big"


@dataclass(frozen=True)
class WhyLine:
    kind: str  # REASON, WARNING or SUGGESTION
    text: str


def cache_source_text(plan: Plan) -> str:
    """How the plan's KV cache was sized: the verified formula, llama.cpp's count (an architecture
    the formula is not verified on, planner/families.py), or the unverified formula."""
    arch = plan.spec.architecture
    if plan.kv_source == "llama.cpp":
        return (
            f"KV cache and output buffer: {COUNTED_BY_LLAMA_CPP} (its dry run at these settings; "
            f"the cache formula is not verified on {arch!r})"
        )
    if plan.kv_source == "estimate":
        return f"KV cache: estimated, the cache formula is not verified on {arch!r} and llama.cpp could not count it"
    return f"KV cache: llama.cpp's cache layout for {arch!r}, verified exact against llama.cpp"


def why_lines(plan: Plan) -> list[WhyLine]:
    """The reasons in the planner's order, then the warnings, then what would fit (if nothing does).
    A routed architecture's plan says first where its cache comes from."""
    lines = [WhyLine(REASON, cache_source_text(plan))] if plan.kv_source != "formula" else []
    lines += [WhyLine(REASON, r) for r in plan.reasons] + [WhyLine(WARNING, w) for w in plan.warnings]
    if plan.suggestion:
        lines.append(WhyLine(SUGGESTION, plan.suggestion))
    return lines


def prompt_tokens(plan: Plan) -> int:
    """The prompt the headline reading speed is for."""
    return min(HEADLINE_PROMPT_TOKENS, plan.settings.n_ctx)


@dataclass(frozen=True)
class LastMeasured:
    """The last measured reply beside its prediction, its figures rounded as every front end shows them."""

    decode_tps: str
    predicted_decode_tps: str
    prefill_tps: str
    predicted_prefill_tps: str
    prompt_tokens: int
    context_tokens: int
    at_utc: str  # "2026-01-02 03:04"
    set_aside: str  # why it was not learned from ("": it was)


def last_measured(plan: Plan) -> LastMeasured | None:
    last: LastReply | None = last_reply_for(plan)
    if last is None:
        return None
    return LastMeasured(
        decode_tps=f"{last.decode_tps:.1f}",
        predicted_decode_tps=f"{last.predicted_decode_tps:.1f}",
        prefill_tps=f"{last.prefill_tps:.0f}",
        predicted_prefill_tps=f"{last.predicted_prefill_tps:.0f}",
        prompt_tokens=last.prompt_tokens,
        context_tokens=last.context_tokens,
        at_utc=last.at[:16].replace("T", " "),
        set_aside=last.set_aside,
    )


@dataclass(frozen=True)
class AlternativeRow:
    label: str
    memory_total_bytes: int
    memory_delta_bytes: int  # against the plan's own total, on the same side (VRAM, or RAM without a GPU)
    verdict: str  # FITS, REFUSED or TOO_BIG
    refused: str | None  # what llama.cpp would say
    speed: SpeedPrediction


def alternative_rows(plan: Plan) -> list[AlternativeRow]:
    base = plan.memory.device.total_bytes if plan.target.has_gpu else plan.memory.host.total_bytes
    return [
        AlternativeRow(
            label=a.label,
            memory_total_bytes=a.memory_total_bytes,
            memory_delta_bytes=a.memory_total_bytes - base,
            verdict=FITS if a.fits else (REFUSED if a.refused else TOO_BIG),
            refused=a.refused,
            speed=a.speed,
        )
        for a in plan.alternatives
    ]
