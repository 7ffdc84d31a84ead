"""The passkey evaluation's keys (torch-free, so the bench's report code can check saved runs)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence


def passkey_keys(
    lengths: Sequence[int], depths: Sequence[float], trials: int, seed: int = 0
) -> dict[tuple[int, float], list[str]]:
    """The keys `passkey` draws per (length, depth): one seeded stream in the order of `lengths` and
    `depths` as given, so the same depths in another order (or fewer of them) draw other keys."""
    rng = random.Random(seed)
    return {
        (length, depth): [f"{rng.randrange(10000, 100000)}" for _ in range(trials)]
        for length, depth in itertools.product(lengths, depths)
    }
