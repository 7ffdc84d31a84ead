"""Progress of prompt processing (prefill), reported between llama.cpp batches.

A long document can take minutes to read on a CPU; the user sees tokens done of total, the rate
and the time left, and can cancel (the part already read stays in the cache for the next try).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vrampilot.units import format_count


@dataclass(frozen=True)
class PromptProgress:
    done: int  # prompt tokens evaluated this turn so far
    total: int  # prompt tokens this turn evaluates (the reused prefix is not counted)
    elapsed_s: float
    reused: int = 0  # prompt tokens kept from the cache

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    @property
    def tokens_per_s(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None before the first batch finished."""
        rate = self.tokens_per_s
        if rate <= 0:
            return None
        return (self.total - self.done) / rate

    def text(self) -> str:
        """'Reading the prompt: 2048 of 6120 tokens · 180 tokens/s · about 23 s left'."""
        parts = [f"Reading the prompt: {format_count(self.done)} of {format_count(self.total)} tokens"]
        if self.reused:
            parts[0] += f" ({format_count(self.reused)} already in the cache)"
        if self.done and self.tokens_per_s > 0:
            parts.append(f"{format_count(self.tokens_per_s)} tokens/s")
        eta = self.eta_s
        if eta is not None and self.done < self.total:
            parts.append(f"about {_duration(eta)} left")
        return " · ".join(parts)


def _duration(s: float) -> str:
    if s < 60:
        return f"{max(s, 1):.0f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s"


PromptProgressFn = Callable[[PromptProgress], None]
