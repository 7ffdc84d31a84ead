"""Saved bench/speed.py runs replayed: the replies' corrections applied to the whole prediction (as
the app did until the generating factor moved to the part of a step that does not grow with the
context) or to its non-attention part only (the replies are shallow: 40-750 tokens) (#19).

For every run given, each calibration reply's measured speed is set against the current speed
model's prediction for it, split into its non-attention part b and its attention a; the cases are
then predicted with the median of each model's replies at the case's thread count (two or more;
busy or set-aside replies left out), either scaling b + a ("whole") or b alone ("base-only"), and
compared with what the run measured.
Run: .venv/bin/python bench/experiments/calibration-replay.py bench/experiments/issue19-speed-*.json
"""

from __future__ import annotations

import json
import statistics as st
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def split(m: Any, kind: str, n_tokens: int, gen: int) -> tuple[float, float]:
    """(non-attention, attention) seconds the model predicts for a reply whose whole conversation of
    n_tokens was read (`kind` "prefill") or for its generated tokens after it (per token)."""
    from vrampilot.planner import cpu_speed as cs

    nothing = tuple(None for _ in m.attention)
    if kind == "prefill":
        s = m.settings
        full = m.prefill_seconds(n_tokens, 0)
        base = cs.prefill_seconds(m.table, m.host_layers, True, nothing, n_tokens, 0, s.n_batch, s.n_ubatch, m.kv_type,
                                  s.n_threads_batch, m.rates)  # fmt: skip
        return base, full - base
    points = [int(n_tokens + max(1, gen) * (i + 0.5) / 5) for i in range(5)]
    full = sum(m.decode_seconds(p) for p in points) / 5
    base = sum(cs.decode_seconds(m.table, m.host_layers, True, nothing, p, m.kv_type, m.settings.n_threads, m.rates)
               for p in points) / 5  # fmt: skip
    return base, full - base


def replay(run: str, specs: dict[str, Any], by_file: dict[str, Any]) -> tuple[int, int, int, int]:
    from tests.machines import measured_machine

    from vrampilot.hardware.measured import HostProbe
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.speed import SpeedModel
    from vrampilot.planner.target import target_cpu_only, target_from_machine

    data = json.loads(Path(run).read_text(encoding="utf-8"))
    machine = measured_machine(HostProbe.from_dict(data["probe"]), cores=2)
    ratios: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for e in data["calibration_replies"]:
        if e.get("set_aside") or e.get("others", 0) > 0.25:
            continue
        spec, t = by_file[e["model"]], e["threads"]
        p = plan(spec, target_from_machine(machine), Pins(n_threads=t, n_threads_batch=t), exact=True)
        m = SpeedModel(p.spec, p.settings, p.target, p.memory)
        for kind, tps, timed in (("decode", e["decode_tps"], e["generated"] >= 8),
                                 ("prefill", e["prefill_tps"], e["prompt_tokens"] >= 512)):  # fmt: skip
            if not timed:
                continue
            b, a = split(m, kind, e["prompt_tokens"], e["generated"])
            measured_s = (1 if kind == "decode" else e["prompt_tokens"]) / tps
            # measured / predicted speed as the app learns it; the same error put on b alone.
            ratios.setdefault((e["model"], t, kind), []).append(((b + a) / measured_s, max(0.05 * b, measured_s - a) / b))
    whole = base_only = decode_base = 0
    for r in data["rows"]:
        name, rest = r["case"][:22].strip(), r["case"][22:].split()
        t, n_ctx = int(rest[0][:-1]), int(rest[1][:-1]) * 1024
        spec = specs[name]
        p = plan(spec, target_cpu_only(machine), Pins(n_ctx=n_ctx, n_threads=t, n_threads_batch=t))
        m = SpeedModel(p.spec, p.settings, p.target, p.memory)
        rs = ratios.get((spec.path.name, t, r["kind"]), [])
        f_whole = min(2.0, max(0.5, st.median(x[0] for x in rs))) if len(rs) >= 2 else 1.0
        f_base = min(2.0, max(0.5, st.median(x[1] for x in rs))) if len(rs) >= 2 else 1.0
        b, a = split(m, r["kind"], r["prompt_tokens"], r["generated"])
        measured_s = (1 if r["kind"] == "decode" else r["prompt_tokens"]) / r["measured_tps"]
        r_whole, r_base = measured_s / ((b + a) / f_whole), measured_s / (f_base * b + a)  # predicted / measured
        whole += abs(r_whole - 1) <= 0.15
        base_only += abs(r_base - 1) <= 0.15
        decode_base += abs((r_base if r["kind"] == "decode" else r_whole) - 1) <= 0.15
        print(f"  {r['case']:<30} {r['kind']:<8} stored after {r['after_ratio']:.2f}  whole {r_whole:.2f}  "
              f"base-only {r_base:.2f}")  # fmt: skip
    print(f"{run}: within ±15% after: whole {whole}, base-only {base_only}, base-only for generating only "
          f"{decode_base} of {len(data['rows'])}")  # fmt: skip
    return whole, base_only, decode_base, len(data["rows"])


def main() -> None:
    import speed as bench  # bench/speed.py

    from vrampilot.gguf import load_model_spec
    from vrampilot.paths import embedded_model_path

    paths = {"SmolLM2-135M Q4_1/Q8_0": embedded_model_path(), **{n: bench.fixture(n) for n in bench.FIXTURES}}
    specs = {k: load_model_spec(v) for k, v in paths.items()}
    by_file = {s.path.name: s for s in specs.values()}
    totals = [replay(run, specs, by_file) for run in sys.argv[1:]]
    print(f"all runs: whole {sum(x[0] for x in totals)}, base-only {sum(x[1] for x in totals)}, base-only for "
          f"generating only {sum(x[2] for x in totals)} of {sum(x[3] for x in totals)}")  # fmt: skip


if __name__ == "__main__":
    main()
