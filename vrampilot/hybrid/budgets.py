"""Per-head budgets (Ada-KV / PyramidKV, training-free): how far back each KV head keeps tokens.

Input: for every KV head, the attention mass it would lose with a window ending at each of a few
distances (calibrate.far_mass, measured with the full cache on calibration data only), and the bytes
each choice costs (layer_plan.py). Output: one reach per head, None for "every token", that minimises the
summed lost mass within a byte budget. Greedy by lost mass saved per byte, upgrading one head at a
time: a head that reads the far past (a retrieval head at the answer, a broad head over the text)
is worth its bytes, one that looks only at recent tokens is not. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HeadBudget:
    layer: int
    head: int
    reach: int | None  # older tokens kept beyond the f16 window (None: every one)
    kv_bytes: int  # what that costs at the budget's length
    lost_mass: float  # the calibration's attention mass beyond it (0 for None)


def allocate_reach(
    lost: Sequence[Sequence[Sequence[float]]],
    distances: Sequence[int],
    window: int,
    budget_bytes: int,
    head_bytes: Callable[[int | None], int],
) -> list[HeadBudget]:
    """Choose a reach per KV head. `lost[layer][head][j]`: mass lost with a window ending
    distances[j] tokens back; `head_bytes(reach)`: what one head holds with that reach.

    Choices: reach = distance - window for each distance not shorter than the window, or None (keep
    everything, lost 0). Every head starts at its shortest choice; raises ValueError when even
    that does not fit.
    """
    reaches: list[int | None] = [d - window for d in distances if d >= window]
    cols = [j for j, d in enumerate(distances) if d >= window]
    costs = [head_bytes(r) for r in [*reaches, None]]
    heads = [(il, h) for il in range(len(lost)) for h in range(len(lost[il]))]
    loss = {(il, h): [float(lost[il][h][j]) for j in cols] + [0.0] for il, h in heads}
    options: list[tuple[int | None, int]] = list(zip([*reaches, None], costs, strict=True))
    choice = dict.fromkeys(heads, 0)
    used = len(heads) * costs[0]
    if used > budget_bytes:
        raise ValueError(f"the shortest reach already needs {used} bytes, over the budget of {budget_bytes}")
    while True:
        best: tuple[float, tuple[int, int], int] | None = None
        for key in heads:
            c = choice[key]
            for j in range(c + 1, len(options)):
                extra = costs[j] - costs[c]
                if extra <= 0 or used + extra > budget_bytes:
                    continue
                ratio = (loss[key][c] - loss[key][j]) / extra
                if best is None or ratio > best[0]:
                    best = (ratio, key, j)
        if best is None or best[0] <= 0:
            break
        _, key, j = best
        used += costs[j] - costs[choice[key]]
        choice[key] = j
    return [
        HeadBudget(il, h, options[choice[(il, h)]][0], options[choice[(il, h)]][1], loss[(il, h)][choice[(il, h)]])
        for il, h in heads
    ]
