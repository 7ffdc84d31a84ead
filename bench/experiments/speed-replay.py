"""Predictions of a saved bench/speed.py run remade with the current speed model (issue #19).

A change to the speed model can be judged on runs from machines no longer at hand: the run's JSON
keeps the probe and, per case, what llama.cpp measured and the reply's conditions. This predicts
each case again from that probe alone (the "before" of bench/speed.py; the "after" needs the
replies' full conversations, which the JSON does not keep) and prints old and new ratios.
Run: .venv/bin/python bench/experiments/speed-replay.py bench/experiments/issue19-speed-threads.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    import speed as bench  # bench/speed.py
    from tests.machines import measured_machine

    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware.measured import HostProbe
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner.calibration import ReplyMeasurement, reply_prediction
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.target import target_cpu_only

    paths = {"SmolLM2-135M Q4_1/Q8_0": embedded_model_path(), **{n: bench.fixture(n) for n in bench.FIXTURES}}
    for run in sys.argv[1:]:
        data = json.loads(Path(run).read_text(encoding="utf-8"))
        probe = HostProbe.from_dict(data["probe"])
        target = target_cpu_only(measured_machine(probe, cores=2))
        print(f"\n{run} (probe {probe.measured_at}, {probe.cpu_variant})")
        held = {"old": 0, "new": 0}
        worst = {"old": 1.0, "new": 1.0}
        for row in data["rows"]:
            name, rest = row["case"][:22].strip(), row["case"][22:].split()
            threads, n_ctx = int(rest[0][:-1]), int(rest[1][:-1]) * 1024
            p = plan(
                load_model_spec(paths[name]), target, Pins(n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads)
            )
            n = row["prompt_tokens"]
            pred = reply_prediction(p, ReplyMeasurement(n, n, row["generated"], 0.0, 0.0), calibrated=False)
            new = (
                pred.decode_tps / row["measured_tps"]
                if row["kind"] == "decode"
                else pred.prefill_tps / row["measured_tps"]
            )
            old = row["before_ratio"]
            for k, v in (("old", old), ("new", new)):
                held[k] += abs(v - 1) <= 0.25
                worst[k] = max(worst[k], v, key=lambda x: abs(x - 1))
            print(
                f"  {row['case']:<30} {row['kind']:<8} measured {row['measured_tps']:7.1f}  before {old:5.2f}  now {new:5.2f}"
            )
        n = len(data["rows"])
        print(
            f"  within ±25%: {held['old']} of {n} then, {held['new']} of {n} now; worst {worst['old']:.2f} then, "
            f"{worst['new']:.2f} now"
        )


if __name__ == "__main__":
    main()
