"""How close any prediction can come on this machine: the bench's own repeatability (#19).

bench/speed.py measures each case as the median of its rounds, in one run of about ten minutes. A
VM's speed moves by itself between such runs, so even a predictor that knew each case's usual
speed exactly cannot land every case of every run within a limit narrower than that movement.
This scores such an oracle: for each saved run, each case is "predicted" with the geometric mean
of what the other runs measured for it (nothing from the run itself), and the cases within ±25%
and ±15% are counted, next to what the app's own predictions held in that run (its before and
after columns, whichever code it ran). Runs of other machines or of other case lists are left
out by giving only the runs wanted.

Run: .venv/bin/python bench/experiments/noise-ceiling.py bench/experiments/issue19-speed-genoa*.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

LIMITS = {"before": 0.25, "after": 0.15}


def main() -> None:
    runs: dict[str, dict[tuple[str, str], dict[str, float]]] = {}
    for arg in sys.argv[1:]:
        rows = json.loads(Path(arg).read_text())["rows"]
        runs[Path(arg).stem.removeprefix("issue19-speed-")] = {(r["case"], r["kind"]): r for r in rows}
    shared = set.intersection(*(set(r) for r in runs.values())) if runs else set()
    if len(runs) < 2 or not shared:
        sys.exit("give two or more bench/speed.py JSON files with the same cases")
    keys = sorted(shared)
    print(f"{len(runs)} runs, {len(keys)} cases each: the oracle predicts a case with the other runs' geometric mean")
    print(f"{'run':<12} {'oracle ±25%':>12} {'app before':>11} {'oracle ±15%':>12} {'app after':>10}  oracle's worst")
    totals = {"oracle_before": 0, "before": 0, "oracle_after": 0, "after": 0}
    for name, rows in runs.items():
        others = [r for n, r in runs.items() if n != name]
        ratios = {}
        for k in keys:
            usual = math.exp(statistics.mean(math.log(o[k]["measured_tps"]) for o in others))
            ratios[k] = usual / rows[k]["measured_tps"]
        counts = {}
        for phase, limit in LIMITS.items():
            counts[f"oracle_{phase}"] = sum(1 for r in ratios.values() if abs(r - 1) <= limit)
            counts[phase] = sum(1 for k in keys if abs(rows[k][f"{phase}_ratio"] - 1) <= limit)
        for key, n in counts.items():
            totals[key] += n
        worst = max(ratios, key=lambda k: abs(ratios[k] - 1))
        print(f"{name:<12} {counts['oracle_before']:>9}/{len(keys)} {counts['before']:>8}/{len(keys)} "
              f"{counts['oracle_after']:>9}/{len(keys)} {counts['after']:>7}/{len(keys)}  "
              f"{ratios[worst]:.2f} ({worst[0].strip()}, {worst[1]})")  # fmt: skip
    n = len(runs) * len(keys)
    print(f"{'all':<12} {totals['oracle_before']:>8}/{n} {totals['before']:>7}/{n} {totals['oracle_after']:>8}/{n} "
          f"{totals['after']:>6}/{n}")  # fmt: skip
    spread = [statistics.pstdev([math.log(r[k]["measured_tps"]) for r in runs.values()]) for k in keys]
    print(f"a case's measured speed from run to run: sd of the log {statistics.median(spread):.3f} (median over "
          f"cases), {max(spread):.3f} at most")  # fmt: skip


if __name__ == "__main__":
    main()
