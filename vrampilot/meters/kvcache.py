"""What a compressing KV cache holds, against what llama.cpp's f16 cache would hold for the same tokens.

The experimental hybrid backend (vrampilot.hybrid) counts the bytes it really keeps (window, FP8 entries,
their scales); the meter shows that beside the full f16 cache, the number a llama.cpp user knows.
Qt-free and torch-free: the numbers come from `HybridSession.kv_bytes_held()` and
`full_cache_bytes()`, and this module only turns them into the one line the panel and the status
bar show, so both say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vrampilot.units import format_bytes


@dataclass(frozen=True)
class KvCacheUsage:
    held_bytes: int  # what the cache holds now, everything counted
    full_f16_bytes: int  # what llama.cpp's f16 cache would hold for the same tokens
    tokens: int  # tokens the cache has seen

    @property
    def share(self) -> float | None:
        """Held over full; None before the first token (there is nothing to compare)."""
        return self.held_bytes / self.full_f16_bytes if self.full_f16_bytes > 0 else None

    def text(self) -> str:
        """The meter line: "KV cache held: X of Y for the full f16 cache (Z%)"."""
        if self.share is None:
            return "KV cache held: nothing yet (the hybrid cache fills as this chat runs)"
        return (
            f"KV cache held: {format_bytes(self.held_bytes)} of {format_bytes(self.full_f16_bytes)} "
            f"for the full f16 cache ({self.share:.1%})"
        )

    def short_text(self) -> str:
        """For the status bar, where space is short."""
        if self.share is None:
            return "KV held: -"
        return f"KV held {format_bytes(self.held_bytes)} / {format_bytes(self.full_f16_bytes)} f16 ({self.share:.0%})"

    def to_dict(self) -> dict[str, int]:
        """The keys stored with a reply's stats, so a reopened chat still shows them."""
        return {"kv_bytes_held": self.held_bytes, "kv_full_f16_bytes": self.full_f16_bytes, "kv_tokens": self.tokens}

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any] | None) -> KvCacheUsage | None:
        """The usage saved with a reply's stats, or None for replies without it (llama.cpp's)."""
        if not stats or "kv_bytes_held" not in stats or "kv_full_f16_bytes" not in stats:
            return None
        return cls(int(stats["kv_bytes_held"]), int(stats["kv_full_f16_bytes"]), int(stats.get("kv_tokens", 0)))
