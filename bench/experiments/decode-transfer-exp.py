"""How much of the built-in model's decode factor carries to other models? Replayed over saved runs (#19).

planner/graph_factors.py fits `decode_base`, what the built-in model's real decode steps cost beyond
the sum of its kernels (weights and fixed costs), per thread count, and every model's prediction on
the machine is multiplied by it. On a Zen 4 VM that factor at 1 thread came out x0.98-1.99 from one
probe to the next while the fixtures' 1-thread generating read 0.58-1.03 of measured before replies,
lower the larger the factor. This predicts every case of saved bench/speed.py runs again from its
probe alone (bench/speed.py's "before") with other models' decode factor raised to a power p (1: as
the app does; 0: the kernels' sum alone), the built-in model keeping its own, and counts the cases
within ±25% per run and over the runs of each machine. ("p 0 at 1T only" is what the app does now:
planner/graph_factors.py `factors_for_model`.)

Run: .venv/bin/python bench/experiments/decode-transfer-exp.py bench/experiments/issue19-speed-*.json
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

POWERS = (1.0, 0.75, 0.5, 0.25, 0.0)
BUILT_IN = "SmolLM2-135M Q4_1/Q8_0"


def main() -> None:
    import speed as bench  # bench/speed.py
    from tests.machines import measured_machine

    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware.measured import HostProbe, RateAt
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner import graph_factors as gf
    from vrampilot.planner import speed as speed_module
    from vrampilot.planner.target import target_cpu_only

    paths = {BUILT_IN: embedded_model_path(), **{n: bench.fixture(n) for n in bench.FIXTURES}}
    specs = {name: load_model_spec(p) for name, p in paths.items() if p is not None}
    runs = [(Path(r).stem.removeprefix("issue19-speed-"), json.loads(Path(r).read_text(encoding="utf-8")))
            for r in sys.argv[1:]]  # fmt: skip
    state: dict[str, object] = {"power": 1.0, "built_in": True, "only": None}

    def patched(spec, probe, cores):  # type: ignore[no-untyped-def]
        g = gf.graph_factors(probe, cores)  # the run's factors, as every model took them before
        if g is None or state["built_in"]:
            return g
        p, only = float(state["power"]), state["only"]  # type: ignore[arg-type]
        base = tuple(RateAt(r.threads, r.value ** p if only in (None, r.threads) else r.value) for r in g.decode_base)
        return replace(g, decode_base=base)

    speed_module.factors_for_model = patched  # type: ignore[assignment]
    variants = [(f"p {p:g}", p, None) for p in POWERS] + [(f"p {p:g} at 1T only", p, 1) for p in (0.5, 0.0)]
    for label, power, only in variants:
        state["power"], state["only"] = power, only
        per_run, groups = [], {"genoa": [0, 0], "other": [0, 0]}
        for name, data in runs:
            if data["probe"].get("reference") is None:
                continue
            probe = HostProbe.from_dict(data["probe"])
            target = target_cpu_only(measured_machine(probe, cores=2))
            held = 0
            for row in data["rows"]:
                model = bench.parse_label(row["case"])[0]
                state["built_in"] = model == BUILT_IN
                held += abs(bench.replayed_before(specs[model], target, row) - 1) <= 0.25
            group = groups["genoa" if name.startswith("genoa") else "other"]
            group[0] += held
            group[1] += len(data["rows"])
            per_run.append(f"{name} {held}")
        print(f"{label}: Zen 4 VM (genoa*) {groups['genoa'][0]} of {groups['genoa'][1]}, the other VM "
              f"{groups['other'][0]} of {groups['other'][1]} within ±25% before replies")  # fmt: skip
        print("  " + ", ".join(per_run), flush=True)


if __name__ == "__main__":
    main()
