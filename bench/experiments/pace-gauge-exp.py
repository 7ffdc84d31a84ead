"""Does a short gauge of llama.cpp's own kernels track the machine's moment as replies see it? (#19)

On a VM whose neighbours share the memory bus and cores, replies ran 1.5-2x slower for minutes with
no other program in sight. Every second or so, for `seconds`: time the gauges (a q8_0 product shaped
like a prompt's ubatch, a q4_0 one, a q8_0 mat-vec over more bytes than the last-level cache, and
numpy's RAM read), then one reply of the qwen2 fixture of bench/speed.py (a ~600-token prompt, 48
tokens generated) through the app's engine. Prints each row, then how well each gauge follows the
replies (correlation of the logs), and what setting aside replies whose pace gauge (product +
mat-vec time, hardware/pace.py) ran above its usual / SLOW_PACE does to their spread.

Run: .venv/bin/python bench/experiments/pace-gauge-exp.py [seconds] [threads] [out.json]
     .venv/bin/python bench/experiments/pace-gauge-exp.py --analyse out.json
"""

from __future__ import annotations

import json
import math
import os
import statistics as st
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def measure(seconds: float, threads: int) -> list[dict[str, float]]:
    os.environ.setdefault("VRAMPILOT_HOME", tempfile.mkdtemp(prefix="vrampilot-pace-"))
    import speed as bench  # bench/speed.py

    from vrampilot.engine import Engine, SamplingParams
    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware import detect_machine
    from vrampilot.hardware.probe import ggml_type_id, stream_bytes
    from vrampilot.llamacpp.ggml import CpuKernels
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.target import target_cpu_only

    machine = detect_machine()
    path = bench.fixture("qwen2 GQA+bias Q8_0")
    p = plan(load_model_spec(path), target_cpu_only(machine), Pins(n_ctx=2048, n_threads=threads, n_threads_batch=threads))
    engine = Engine()
    engine.load(p)
    cpu = CpuKernels()
    q8, q4 = ggml_type_id("q8_0"), ggml_type_id("q4_0")
    rows: list[dict[str, float]] = []
    end = time.time() + seconds
    try:
        while time.time() < end:
            g: dict[str, float] = {}
            work = 2 * 1024 * 1024 * 128
            g["mm_q8_pre"] = work / cpu.mul_mat(q8, 1024, 1024, 128, [threads], repeats=3)[0].seconds / 1e9
            g["mm_q4_pre"] = work / cpu.mul_mat(q4, 1024, 1024, 128, [threads], repeats=3)[0].seconds / 1e9
            n = max(64, stream_bytes() // cpu.row_bytes(q8, 4096) // 64 * 64)
            nbytes = cpu.row_bytes(q8, 4096) * n
            g["mv_q8"] = nbytes / cpu.mul_mat(q8, 4096, n, 1, [threads], repeats=2)[0].seconds / 1e9
            g["mv_bytes"] = nbytes
            g["ram"] = bench.ram_gauge()
            reply = engine.chat(bench.prompt_for(engine, 600, 10000 + len(rows)), SamplingParams(max_tokens=48, seed=1))
            g["prefill"], g["decode"], g["t"] = reply.stats.prefill_tps, reply.stats.decode_tps, time.time()
            rows.append(g)
            print(json.dumps({k: round(v, 3) for k, v in g.items()}), flush=True)
            time.sleep(1.0)
    finally:
        engine.unload()
        cpu.close()
    return rows


def analyse(rows: list[dict[str, Any]]) -> None:
    from vrampilot.hardware.measured import PACE_WINDOW, SLOW_PACE

    for r in rows:
        # The pace gauge: the product's and the mat-vec's times summed (hardware/pace.py).
        mv_bytes = r.get("mv_bytes", 48 << 20)
        r["pace"] = 1.0 / (2 * 1024 * 1024 * 128 / r["mm_q8_pre"] / 1e9 + mv_bytes / r["mv_q8"] / 1e9)

    def logs(key: str, some: list[dict[str, Any]] = rows) -> list[float]:
        return [math.log(r[key]) for r in some]

    print(f"{len(rows)} replies over {(rows[-1]['t'] - rows[0]['t']) / 60:.1f} minutes")
    for kind in ("prefill", "decode"):
        med = st.median(r[kind] for r in rows)
        print(f"{kind}: {min(r[kind] for r in rows) / med:.2f}-{max(r[kind] for r in rows) / med:.2f} of the median, "
              f"sd of the log {st.pstdev(logs(kind)):.3f}, lag-1 autocorrelation "
              f"{st.correlation(logs(kind)[:-1], logs(kind)[1:]):.2f}")  # fmt: skip
    for gauge in ("mm_q8_pre", "mm_q4_pre", "mv_q8", "ram", "pace"):
        print(f"  {gauge:<10} correlation with prompts {st.correlation(logs(gauge), logs('prefill')):.2f}, "
              f"generating {st.correlation(logs(gauge), logs('decode')):.2f}")  # fmt: skip
    # The app's rule: the usual pace is the median of the last PACE_WINDOW readings (the first
    # reading stands in for the probe's).
    kept, seen = [], []
    for r in rows:
        usual = st.median(seen[-PACE_WINDOW:]) if seen else None
        if usual is None or r["pace"] >= SLOW_PACE * usual:
            kept.append(r)
        seen.append(r["pace"])
    print(f"set aside at SLOW_PACE {SLOW_PACE}: {len(rows) - len(kept)} of {len(rows)}")
    for kind in ("prefill", "decode"):
        med = st.median(r[kind] for r in rows)
        slow = sum(1 for r in rows if r[kind] < 0.85 * med)
        slow_kept = sum(1 for r in kept if r[kind] < 0.85 * med)
        print(f"  {kind}: sd of the log {st.pstdev(logs(kind)):.3f} -> {st.pstdev(logs(kind, kept)):.3f}; replies 15% or "
              f"more below the median {slow}, of them set aside {slow - slow_kept}; median of the kept "
              f"{st.median(r[kind] for r in kept) / med:.2f} of all")  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--analyse"]:
        analyse(json.loads(Path(sys.argv[2]).read_text(encoding="utf-8")))
        return
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 480
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    rows = measure(seconds, threads)
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps(rows), encoding="utf-8")
    analyse(rows)


if __name__ == "__main__":
    main()
