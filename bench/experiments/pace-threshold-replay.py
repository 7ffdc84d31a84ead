"""Where the pace gauge should set a reply aside (issue #19): saved bench/speed.py runs replayed
with the threshold of planner/calibration.py (hardware/measured.py `SLOW_PACE`) at 0 (the gauge
ignored), 0.75, 0.80, 0.85 and 0.90.

For every run given, its calibration replies are learned in order as the app learns them, each
chat stopping once three were learned from (as the bench's chats do: a reply set aside is followed
by the next turn), then every case is predicted and compared with what the run measured: how many
within ±15%, and how many replies the gauge set aside.
Run: .venv/bin/python bench/experiments/pace-threshold-replay.py bench/experiments/issue19-speed-*.json
(runs whose replies did not read the gauge are skipped)
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

THRESHOLDS = (0.0, 0.75, 0.80, 0.85, 0.90)
CALIBRATION_REPLIES = 3


def replay(data: dict[str, Any], specs: dict[str, Any], by_file: dict[str, Any], threshold: float) -> tuple[int, int]:
    from saved_runs import learn_saved_replies
    from tests.machines import measured_machine

    from vrampilot.hardware.measured import HostProbe
    from vrampilot.planner import calibration
    from vrampilot.planner.calibration import ReplyMeasurement, reply_prediction
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.target import target_cpu_only

    machine = measured_machine(HostProbe.from_dict(data["probe"]), cores=2)
    saved = calibration.SLOW_PACE
    calibration.SLOW_PACE = threshold
    try:
        speed, aside = learn_saved_replies(data, machine, by_file, per_chat=CALIBRATION_REPLIES)
    finally:
        calibration.SLOW_PACE = saved
    after = replace(machine, speed=speed)
    within = 0
    for r in data["rows"]:
        name, rest = r["case"][:22].strip(), r["case"][22:].split()
        t, n_ctx = int(rest[0][:-1]), int(rest[1][:-1]) * 1024
        p = plan(specs[name], target_cpu_only(after), Pins(n_ctx=n_ctx, n_threads=t, n_threads_batch=t))
        pred = reply_prediction(p, ReplyMeasurement(r["prompt_tokens"], r["prompt_tokens"], r["generated"], 0.0, 0.0))
        ratio = (pred.decode_tps if r["kind"] == "decode" else pred.prefill_tps) / r["measured_tps"]
        within += abs(ratio - 1) <= 0.15
    return within, aside


def main() -> None:
    from saved_runs import bench_specs

    specs, by_file = bench_specs()
    totals = dict.fromkeys(THRESHOLDS, 0)
    n_cases = 0
    for run in sys.argv[1:]:
        data = json.loads(Path(run).read_text(encoding="utf-8"))
        replies = data["calibration_replies"]
        if not replies or "threads" not in replies[0] or not replies[0].get("pace_ms"):
            continue
        n_cases += len(data["rows"])
        cells = []
        for threshold in THRESHOLDS:
            within, aside = replay(data, specs, by_file, threshold)
            totals[threshold] += within
            cells.append(f"{threshold:.2f}: {within:2d} (set aside {aside:2d})")
        print(f"{Path(run).name:<34} " + "  ".join(cells), flush=True)
    print(f"within ±15% of {n_cases} cases: " + ", ".join(f"{k:.2f} {v}" for k, v in totals.items()))


if __name__ == "__main__":
    main()
