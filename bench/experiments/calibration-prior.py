"""How much a few replies should move a prediction the probe made (#19): saved bench/speed.py runs
replayed through the app's own learning (planner/calibration.py `learn_reply`), with the probe's
prediction weighed as 0 (replies followed whole), 1, 2 or 4 replies (hardware/measured.py
`PROBE_PRIOR_REPLIES`).

For every run given, its calibration replies are learned in order on a machine with the run's
probe, then each case is predicted before any reply and after them, and compared with what the run
measured: how many cases are within ±15%, and the worst ratio.
Run: .venv/bin/python bench/experiments/calibration-prior.py bench/experiments/issue19-speed-*.json
(runs saved before the bench stored each reply's thread count are skipped)
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

PRIORS = (0.0, 1.0, 2.0, 4.0)
# Tapered: the probe weighs as 2 replies while the replies' median agrees with it, and less the
# further it lies from it (2 / (1 + (log median / log scale)^2), a heavy-tailed prior: a probe read
# at a bad moment is outvoted quickly, a good one steadies noisy replies).
TAPERS = (1.10, 1.15, 1.20, 1.30)


def _tapered(scale: float):  # type: ignore[no-untyped-def]
    import math
    import statistics

    from vrampilot.hardware import measured

    def factor(ratios: tuple[float, ...], prior_replies: float = 0.0) -> float:
        if not ratios:
            return 1.0
        n, m = len(ratios), math.log(statistics.median(ratios))
        prior = prior_replies / (1.0 + (m / math.log(scale)) ** 2)
        return min(measured.FACTOR_MAX, max(measured.FACTOR_MIN, math.exp(m * n / (n + prior))))

    return factor


def replay(data: dict[str, Any], specs: dict[str, Any], by_file: dict[str, Any]) -> dict[str, tuple[int, float]]:
    from saved_runs import learn_saved_replies
    from tests.machines import measured_machine

    from vrampilot.hardware import measured
    from vrampilot.hardware.measured import HostProbe
    from vrampilot.planner.calibration import ReplyMeasurement, reply_prediction
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.target import target_cpu_only

    machine = measured_machine(HostProbe.from_dict(data["probe"]), cores=2)
    speed, _ = learn_saved_replies(data, machine, by_file)
    learned = replace(machine, speed=speed)
    out: dict[str, tuple[int, float]] = {}
    saved, saved_factor = measured.PROBE_PRIOR_REPLIES, measured._median_factor
    rules = [("before", None, None), *((f"prior {k:g}", k, None) for k in PRIORS),
             *((f"taper {s:g}", 2.0, _tapered(s)) for s in TAPERS)]  # fmt: skip
    try:
        for label, prior, rule in rules:
            measured.PROBE_PRIOR_REPLIES = prior if prior is not None else saved
            measured._median_factor = rule or saved_factor
            within, worst = 0, 1.0
            for r in data["rows"]:
                name, rest = r["case"][:22].strip(), r["case"][22:].split()
                t, n_ctx = int(rest[0][:-1]), int(rest[1][:-1]) * 1024
                p = plan(specs[name], target_cpu_only(learned), Pins(n_ctx=n_ctx, n_threads=t, n_threads_batch=t))
                m = ReplyMeasurement(r["prompt_tokens"], r["prompt_tokens"], r["generated"], 0.0, 0.0)
                pred = reply_prediction(p, m, calibrated=prior is not None)
                ratio = (pred.decode_tps if r["kind"] == "decode" else pred.prefill_tps) / r["measured_tps"]
                within += abs(ratio - 1) <= 0.15
                worst = ratio if abs(ratio - 1) > abs(worst - 1) else worst
            out[label] = (within, worst)
    finally:
        measured.PROBE_PRIOR_REPLIES, measured._median_factor = saved, saved_factor
    return out


def main() -> None:
    from saved_runs import bench_specs

    specs, by_file = bench_specs()
    totals: dict[str, int] = {}
    n_cases = 0
    for run in sys.argv[1:]:
        data = json.loads(Path(run).read_text(encoding="utf-8"))
        if not data["calibration_replies"] or "threads" not in data["calibration_replies"][0]:
            continue
        res = replay(data, specs, by_file)
        n_cases += len(data["rows"])
        for label, (within, _) in res.items():
            totals[label] = totals.get(label, 0) + within
        cells = "  ".join(f"{label}: {w} ({worst:.2f})" for label, (w, worst) in res.items())
        print(f"{Path(run).name:<36} {cells}", flush=True)
    print(f"within ±15% of {n_cases} cases: " + ", ".join(f"{k} {v}" for k, v in totals.items()))


if __name__ == "__main__":
    main()
