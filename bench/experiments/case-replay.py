"""Saved bench/speed.py runs replayed through the current speed model and learning, case by case
(issue #19): which cases miss, in which direction, in how many runs.

For every run given: each case predicted from the run's probe alone ("before"), then its
calibration replies learned in order as the app learns them (planner/calibration.py `learn_reply`,
a chat stopping at three replies learned from, as the bench's does) and each case predicted again
("after"); every ratio is predicted / what that run measured. Prints, per case, the median ratio
over the runs, how many runs missed it (±25% before, ±15% after) and each run's ratio, then the
totals. A change to the model is judged by running it before and after the change.
Run: .venv/bin/python bench/experiments/case-replay.py bench/experiments/issue19-speed-genoa*.json
(runs saved before the bench stored each reply's thread count are skipped)
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CALIBRATION_REPLIES = 3
TOLERANCE = {"before": 0.25, "after": 0.15}


def replay(data: dict[str, Any], specs: dict[str, Any], by_file: dict[str, Any]) -> dict[tuple[str, str], float]:
    from saved_runs import learn_saved_replies
    from tests.machines import measured_machine

    from vrampilot.hardware.measured import HostProbe
    from vrampilot.planner.calibration import ReplyMeasurement, reply_prediction
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.target import target_cpu_only

    machine = measured_machine(HostProbe.from_dict(data["probe"]), cores=2)
    speed, _ = learn_saved_replies(data, machine, by_file, per_chat=CALIBRATION_REPLIES)
    out: dict[tuple[str, str], float] = {}
    for label, m in (("before", machine), ("after", replace(machine, speed=speed))):
        for r in data["rows"]:
            name, rest = r["case"][:22].strip(), r["case"][22:].split()
            t, n_ctx = int(rest[0][:-1]), int(rest[1][:-1]) * 1024
            p = plan(specs[name], target_cpu_only(m), Pins(n_ctx=n_ctx, n_threads=t, n_threads_batch=t))
            case = ReplyMeasurement(r["prompt_tokens"], r["prompt_tokens"], r["generated"], 0.0, 0.0)
            pred = reply_prediction(p, case, calibrated=label == "after")
            predicted = pred.decode_tps if r["kind"] == "decode" else pred.prefill_tps
            out[(label, f"{r['case']} {r['kind']}")] = predicted / r["measured_tps"]
    return out


def main() -> None:
    from saved_runs import bench_specs

    specs, by_file = bench_specs()
    runs: dict[str, dict[tuple[str, str], float]] = {}
    for run in sys.argv[1:]:
        data = json.loads(Path(run).read_text(encoding="utf-8"))
        if not data["calibration_replies"] or "threads" not in data["calibration_replies"][0]:
            continue
        runs[Path(run).stem.removeprefix("issue19-speed-")] = replay(data, specs, by_file)
    if not runs:
        return
    print("runs: " + " ".join(runs))
    cases = sorted({case for ratios in runs.values() for _, case in ratios})
    for label, tol in TOLERANCE.items():
        missed = 0
        print(f"\n{label} (within ±{tol:.0%})")
        for case in cases:
            ratios = [r[(label, case)] for r in runs.values() if (label, case) in r]
            misses = sum(abs(x - 1) > tol for x in ratios)
            missed += misses
            cells = " ".join(f"{x:.2f}" for x in ratios)
            print(f"{case:<46} median {statistics.median(ratios):.2f}  missed {misses:2d}  {cells}")
        total = sum(1 for r in runs.values() for k in r if k[0] == label)
        per_run = " ".join(f"{name} {sum(abs(x - 1) <= tol for k, x in r.items() if k[0] == label)}"
                           for name, r in runs.items())  # fmt: skip
        print(f"{label}: {total - missed} of {total} within ±{tol:.0%} ({per_run})")


if __name__ == "__main__":
    main()
