"""What one reply cost: the numbers shown after each reply and printed by `vrampilot chat --json`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from vrampilot.units import format_count

if TYPE_CHECKING:
    from vrampilot.planner.calibration import ReplyMeasurement

StopReason = Literal["eos", "length", "context", "cancelled"]


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int  # the whole rendered conversation
    evaluated_tokens: int  # prompt tokens actually run through the model this turn
    reused_tokens: int  # prompt tokens whose KV cache was kept from the previous turn
    completion_tokens: int
    ttft_s: float  # from the request to the first generated token (template, prefill, first sample)
    prefill_s: float
    decode_s: float  # from the first to the last generated token
    context_used: int  # tokens in the KV cache after the reply
    n_ctx: int
    stop_reason: StopReason
    # Speculative decoding: drafted tokens the reply judged, and how many the model kept.
    draft_tokens: int = 0
    draft_accepted: int = 0
    # Earlier messages dropped so the reply fit ("Drop oldest turns"): the model did not see them.
    dropped_messages: int = 0

    @classmethod
    def from_times(
        cls,
        prompt_tokens: int,
        reused: int,
        completion: int,
        times: tuple[float, float, float, float],
        context: tuple[int, int],
        stop: StopReason,
    ) -> GenerationStats:
        """`times`: request start, prompt evaluation start, first token, last token; `context`: (used, n_ctx)."""
        t0, t_eval, t_first, t_last = times
        return cls(
            prompt_tokens=prompt_tokens,
            evaluated_tokens=prompt_tokens - reused,
            reused_tokens=reused,
            completion_tokens=completion,
            ttft_s=t_first - t0,
            prefill_s=t_first - t_eval,
            decode_s=max(t_last - t_first, 0.0),
            context_used=context[0],
            n_ctx=context[1],
            stop_reason=stop,
        )

    @property
    def prefill_tps(self) -> float:
        return self.evaluated_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def draft_acceptance(self) -> float | None:
        """Accepted share of the drafted tokens; None when the reply drafted nothing."""
        return self.draft_accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def decode_tps(self) -> float:
        # The first token belongs to the prefill; the rate counts the ones after it.
        n = self.completion_tokens - 1
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    def measurement(self, others_cpu_share: float | None = None, pace_ms: float | None = None) -> ReplyMeasurement:
        """This reply as the speed model learns from it (planner/calibration.py)."""
        from vrampilot.planner.calibration import ReplyMeasurement

        return ReplyMeasurement(
            prompt_tokens=self.prompt_tokens,
            evaluated_tokens=self.evaluated_tokens,
            completion_tokens=self.completion_tokens,
            decode_tps=self.decode_tps,
            prefill_tps=self.prefill_tps,
            others_cpu_share=others_cpu_share,
            pace_ms=pace_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "ttft_s": round(self.ttft_s, 4),
            "decode_tps": round(self.decode_tps, 2),
            "prefill_tps": round(self.prefill_tps, 2),
            "evaluated_tokens": self.evaluated_tokens,
            "reused_tokens": self.reused_tokens,
            "context_used": self.context_used,
            "n_ctx": self.n_ctx,
            "stop_reason": self.stop_reason,
        }
        if self.draft_tokens:  # without drafting the dict stays as it was
            d["draft_tokens"] = self.draft_tokens
            d["draft_accepted"] = self.draft_accepted
        if self.dropped_messages:
            d["dropped_messages"] = self.dropped_messages
        return d

    def summary(self) -> str:
        """One line for the chat view and the CLI."""
        return format_summary(self.to_dict())


def format_summary(d: dict[str, Any]) -> str:
    """The stats line from `GenerationStats.to_dict()` (also as saved with a chat message). A rate
    is shown only where one was measured: a reply stopped before its first token says so, and one
    of a single token has no pace between tokens (both read "0.0 tokens/s", as if it had crawled)."""
    completion = d.get("completion_tokens", 0)
    if not completion and d.get("stop_reason") == "cancelled":
        return "stopped before the first token"
    reused = d.get("reused_tokens", 0)
    tps = d.get("decode_tps", 0.0)
    parts = [
        f"{format_count(d.get('prompt_tokens', 0))} prompt tokens"
        + (f" ({format_count(reused)} reused)" if reused else ""),
        f"first token {d.get('ttft_s', 0.0):.2f} s",
        *([f"{format_count(tps, 1)} tokens/s"] if tps > 0 else []),
        f"{format_count(completion)} token{'' if completion == 1 else 's'}",
        f"context {format_count(d.get('context_used', 0))} / {format_count(d.get('n_ctx', 0))}",
    ]
    extra = {"cancelled": "stopped", "length": "max tokens reached", "context": "context full"}.get(
        str(d.get("stop_reason", ""))
    )
    drafted = d.get("draft_tokens", 0)
    if drafted:
        accepted = d.get("draft_accepted", 0)
        parts.append(f"drafts {accepted}/{drafted} accepted ({accepted / drafted:.0%})")
    if extra:
        parts.append(extra)
    dropped = d.get("dropped_messages", 0)
    if dropped:
        parts.append(f"{dropped} earlier message{'s' if dropped != 1 else ''} dropped to fit, not seen by the model")
    return " · ".join(parts)
