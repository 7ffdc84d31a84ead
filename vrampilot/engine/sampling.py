"""Sampling settings for one reply. Defaults follow llama-server's (temperature 0.8 is its default;
0.7 reads better for small chat models, so the app starts there)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int = 512
    seed: int | None = None  # None: a new random seed per reply
    # Added to the logits of each token of a text, as llama-server's `logit_bias` with text keys
    # (every token the text tokenizes to gets the bias); `--logit-bias '{=100'` makes a tool call's
    # JSON start at once (docs/agents.md). Pairs, not a dict: the params stay frozen and hashable.
    logit_bias: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repeat_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name.replace('_', ' ')} must be a finite number")
        if self.temperature < 0:
            raise ValueError("temperature must be 0 or more (0 = always the most likely token)")
        if not 0 < self.top_p <= 1:
            raise ValueError("top-p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top-k must be 0 or more (0 = off)")
        if not 0 <= self.min_p <= 1:
            raise ValueError("min-p must be in [0, 1]")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat penalty must be positive (1 = off)")
        if self.max_tokens < 1:
            raise ValueError("max tokens must be at least 1")
        # JSON (the app's saved preferences) gives the pairs back as lists
        object.__setattr__(self, "logit_bias", tuple((str(t), float(b)) for t, b in self.logit_bias))
        for text, bias in self.logit_bias:
            if not text:
                raise ValueError("a logit bias needs a token text")
            if not math.isfinite(bias):
                raise ValueError(f"the logit bias of {text!r} must be a finite number")

    def with_(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)
