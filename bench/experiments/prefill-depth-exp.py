"""How a prompt's ubatches slow down with the cells before them, against the speed model (issue #19).

The bench's 4K-token prompts read 1.1-1.3x slower than predicted at 2 threads while 1K-token ones
were right: the prompt's attention over the cache grows with depth and the speed model prices it at
the kernels' rate (graph factor 1, the reference run's 512 cells being too shallow to tell). This
reads a 4096-token prompt ubatch by ubatch (512 tokens each) through llama.cpp, as the engine does
(f16 cache, flash attention), for each model and thread count, and prints each ubatch's time, the
speed model's prediction for it (weights, attention, both with the probe's graph factors), and the
factor on attention that would make the prediction match: measured minus the predicted weights,
over the predicted attention.

Run: .venv/bin/python bench/experiments/prefill-depth-exp.py PROBE.json [models] [threads]
     (PROBE.json: a bench/speed.py --json output, whose probe it uses; models: embedded,qwen2,...)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

UBATCH, N_UBATCHES = 512, 8


def main() -> None:
    import speed as bench  # bench/speed.py

    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware.measured import HostProbe
    from vrampilot.hardware.reference_run import _prompt
    from vrampilot.llamacpp import load
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner.cpu_speed import CpuRates, attention_shapes, prefill_seconds, weight_table
    from vrampilot.planner.graph_factors import graph_factors

    probe = HostProbe.from_dict(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))["probe"])
    wanted = (sys.argv[2] if len(sys.argv) > 2 else "embedded").split(",")
    threads = [int(t) for t in (sys.argv[3] if len(sys.argv) > 3 else "2,1").split(",")]
    paths = {"embedded": embedded_model_path(), **{n.split()[0]: bench.fixture(n) for n in bench.FIXTURES}}
    raw = CpuRates(probe, 2)
    graph = graph_factors(probe, 2)
    rates = CpuRates(probe, 2, graph=graph)
    print(f"probe {probe.measured_at} {probe.cpu_variant}; graph factors {graph}")
    llama_cpp = load()
    n_ctx = UBATCH * N_UBATCHES + 256
    for name in wanted:
        path = paths[name]
        assert path is not None
        spec = load_model_spec(path)
        table, on = weight_table(spec), tuple(True for _ in range(spec.n_layer))
        att = attention_shapes(spec, lambda il: n_ctx)
        none = tuple(None for _ in att)
        llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=UBATCH, n_ubatch=UBATCH, n_threads=max(threads),
                              n_threads_batch=max(threads), flash_attn=True, verbose=False)  # fmt: skip
        try:
            prompt = _prompt(llm.n_vocab(), UBATCH * N_UBATCHES)
            for t in threads:
                llama_cpp.llama_set_n_threads(llm.ctx, t, t)
                llm.reset()
                llm.eval(prompt[:UBATCH])  # warm at this thread count, untimed
                llm.reset()
                total_m = total_p = 0.0
                for i in range(N_UBATCHES):
                    chunk = prompt[i * UBATCH : (i + 1) * UBATCH]
                    t0 = time.perf_counter()
                    llm.eval(chunk)
                    m = time.perf_counter() - t0
                    args = (UBATCH, i * UBATCH, UBATCH, UBATCH, "f16", t)
                    base = prefill_seconds(table, on, True, none, *args, rates)
                    both = prefill_seconds(table, on, True, att, *args, rates)
                    a_raw = prefill_seconds(table, on, True, att, *args, raw) - prefill_seconds(table, on, True, none, *args, raw)
                    total_m, total_p = total_m + m, total_p + both
                    implied = (m - base) / a_raw if a_raw > 0 else float("nan")
                    print(f"{name:<9} {t}T ubatch after {i * UBATCH:5d}: measured {m:6.3f} s  predicted {both:6.3f} "
                          f"(weights {base:6.3f}, attention {both - base:6.3f})  ratio {both / m:5.2f}  "
                          f"attention factor that fits {implied:5.2f}", flush=True)  # fmt: skip
                print(f"{name:<9} {t}T whole 4096-token prompt: measured {total_m:6.2f} s predicted {total_p:6.2f} "
                      f"ratio (tokens/s predicted/measured) {total_m / total_p:5.2f}", flush=True)  # fmt: skip
        finally:
            llm.close()


if __name__ == "__main__":
    main()
