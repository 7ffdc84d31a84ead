"""The graph factors' lower bound for attention and a prompt's matrices, replayed over saved runs (#19).

planner/graph_factors.py fits what the built-in model's real run costs beyond its kernels. Fitted
freely, the prompt's attention factor came out as low as 0.53 and a prompt's matrices' as 0.68 on
a Zen 4 VM (the run read at a fast moment against kernels read at a slow one), and that run's
4K-token prompts were predicted up to 2x too fast. This predicts every case of saved
bench/speed.py runs again from its probe alone (the "before" of bench/speed.py), with the lower
bound `BEST_CASE_MIN` at each value given (0.5 is the free fit: the bound every factor has), and
prints per run how many cases fall within ±25%.

Run: .venv/bin/python bench/experiments/factor-floor-exp.py bench/experiments/issue19-speed-*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

FLOORS = (0.5, 0.9, 1.0, 1.1)


def main() -> None:
    import speed as bench  # bench/speed.py
    from tests.machines import measured_machine

    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware.measured import HostProbe
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner import graph_factors as gf
    from vrampilot.planner.target import target_cpu_only

    paths = {"SmolLM2-135M Q4_1/Q8_0": embedded_model_path(), **{n: bench.fixture(n) for n in bench.FIXTURES}}
    specs = {name: load_model_spec(p) for name, p in paths.items() if p is not None}
    runs = [(Path(r).stem.removeprefix("issue19-speed-"), json.loads(Path(r).read_text(encoding="utf-8")))
            for r in sys.argv[1:]]  # fmt: skip
    for floor in FLOORS:
        gf.BEST_CASE_MIN = floor
        gf.graph_factors.cache_clear()
        held_all = n_all = 0
        per_run = []
        for name, data in runs:
            probe = HostProbe.from_dict(data["probe"])
            target = target_cpu_only(measured_machine(probe, cores=2))
            held = 0
            for row in data["rows"]:
                held += abs(bench.replayed_before(specs[bench.parse_label(row["case"])[0]], target, row) - 1) <= 0.25
            held_all += held
            n_all += len(data["rows"])
            per_run.append(f"{name} {held}")
        print(f"lower bound {floor}: {held_all} of {n_all} within ±25% before replies")
        print("  " + ", ".join(per_run), flush=True)


if __name__ == "__main__":
    main()
