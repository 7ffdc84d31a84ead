"""Why chat replies teach decode factors that do not hold for the bench's cases (issue #19).

For one model, decode tokens/s and the speed model's uncalibrated prediction, for prompts of
several lengths, on the default plan (what the bench's calibration replies use) and on the bench's
pinned plan (n_ctx, threads): separates the plan's settings from the context depth.
Run: .venv/bin/python bench/experiments/decode-depth-exp.py [model-substring]
     [--threads 1 2 --ctx 8192 --depths 80 700 2000 4000]  (pinned plans only, each thread count)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ["VRAMPILOT_HOME"] = tempfile.mkdtemp(prefix="vrampilot-exp-")


def main() -> None:
    import argparse
    from dataclasses import replace

    import speed as bench  # bench/speed.py

    from vrampilot.engine import Engine, SamplingParams
    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware import detect_machine
    from vrampilot.hardware.probe import CORE_WEIGHT_TYPES, measure_host
    from vrampilot.hardware.speed_store import save_probe
    from vrampilot.planner.calibration import ReplyMeasurement, reply_prediction
    from vrampilot.planner.cpu_speed import weight_table
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.target import target_cpu_only, target_from_machine

    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="qwen2")
    ap.add_argument("--threads", type=int, nargs="*", default=[])
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--depths", type=int, nargs="*", default=[80, 300, 700, 1016])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    which = args.model
    name = next(n for n in bench.FIXTURES if n.startswith(which))
    path = bench.fixture(name)
    spec = load_model_spec(path)
    machine = detect_machine()
    from vrampilot.planner.graph_factors import with_reference_types

    types = with_reference_types([*CORE_WEIGHT_TYPES, *weight_table(spec).types()])
    probe = measure_host(machine.cpu.physical_cores, machine.llama.cpu_variant, weight_types=types)
    machine = replace(machine, speed=save_probe(machine.speed.fingerprint, probe))
    from vrampilot.hardware.speed_report import format_probe

    print("\n".join(format_probe(probe)), flush=True)
    if args.threads:
        plans = {f"{t}T {args.ctx // 1024}K": plan(spec, target_cpu_only(machine),
                                                   Pins(n_ctx=args.ctx, n_threads=t, n_threads_batch=t))
                 for t in args.threads}  # fmt: skip
    else:
        plans = {
            "default": plan(spec, target_from_machine(machine), exact=True),
            "pinned 2K": plan(spec, target_cpu_only(machine), Pins(n_ctx=2048, n_threads=2, n_threads_batch=2)),
            "pinned 8K": plan(spec, target_cpu_only(machine), Pins(n_ctx=8192, n_threads=2, n_threads_batch=2)),
        }
    for label, p in plans.items():
        s = p.settings
        print(
            f"{label}: n_ctx {s.n_ctx} threads {s.n_threads}/{s.n_threads_batch} fa {s.flash_attn} "
            f"k {s.type_k} v {s.type_v} batch {s.n_batch}/{s.n_ubatch}",
            flush=True,
        )
    for rnd in range(args.rounds):
        for label, p in plans.items():
            for n in args.depths:
                if n >= p.settings.n_ctx // 2 + 1:
                    continue
                engine = Engine()
                engine.load(p)
                try:
                    msgs = bench.prompt_for(engine, n, rnd * 10 + n)
                    r = engine.chat(msgs, SamplingParams(max_tokens=96, seed=1))
                    st = r.stats
                    pred = reply_prediction(
                        p,
                        ReplyMeasurement(st.prompt_tokens, st.evaluated_tokens, st.completion_tokens, 0, 0),
                        calibrated=False,
                    )
                    print(
                        f"round {rnd} {label:<10} prompt {st.evaluated_tokens:5d} gen {st.completion_tokens:3d} "
                        f"decode {st.decode_tps:6.1f} pred {pred.decode_tps:6.1f} ratio "
                        f"{st.decode_tps / pred.decode_tps:5.2f}  prefill {st.prefill_tps:6.0f} pred "
                        f"{pred.prefill_tps:6.0f} ratio {st.prefill_tps / pred.prefill_tps:5.2f}",
                        flush=True,
                    )
                finally:
                    engine.unload()


if __name__ == "__main__":
    main()
