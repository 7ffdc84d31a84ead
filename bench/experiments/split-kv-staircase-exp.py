"""Does a decode step at 2 threads cost the same all through one padded cache view (issue #19)?

llama.cpp attends over the cache padded to 256 cells and, with an f16 cache and a view of 512 or
more, gives each thread an equal slice of the view; the masked tail costs nothing, so at 2 threads
the first thread's slice is full from half the view on. Prediction (planner/cpu_speed.py
decode_attention_imbalance): at 2 threads, steps after 1030 and after 1270 tokens take the same
time (view 1280, the first thread does 640 cells either way) and after 1290 (view 1536, 768
cells) longer; at 1 thread each depth costs more than the last. The built-in model, flash
attention, f16 cache, medians of 3 x 16 steps per depth and thread count, depths interleaved.
Run: .venv/bin/python bench/experiments/split-kv-staircase-exp.py [depth ...]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEPTHS = tuple(int(x) for x in sys.argv[1:]) or (1030, 1270, 1290, 1530)


def main() -> None:
    from vrampilot.hardware.reference_run import decode_step_times
    from vrampilot.llamacpp import load
    from vrampilot.paths import embedded_model_path

    llama_cpp = load()
    model = embedded_model_path()
    llm = llama_cpp.Llama(
        str(model),
        n_ctx=max(2048, -(-(max(DEPTHS) + 64) // 256) * 256),
        n_batch=512,
        n_ubatch=512,
        n_threads=2,
        n_threads_batch=2,
        flash_attn=True,
        verbose=False,
    )
    words = "The river runs past the old mill, where the town keeps its records of every harvest. " * (max(DEPTHS) // 10 + 20)
    prompt = llm.tokenize(words.encode())[: max(DEPTHS)]
    times: dict[tuple[int, int], list[float]] = {}
    for _round in range(3):
        for depth in DEPTHS:
            llm.reset()
            llama_cpp.llama_set_n_threads(llm.ctx, 2, 2)
            for i in range(0, depth, 512):
                llm.eval(prompt[i : min(depth, i + 512)])
            for t in (2, 1):
                llama_cpp.llama_set_n_threads(llm.ctx, t, 2)
                decode_step_times(llm, prompt[:depth], 4)  # untimed: warm after the switch
                steps = decode_step_times(llm, prompt[:depth], 16)
                times.setdefault((t, depth), []).extend(steps)
    for t in (2, 1):
        base = statistics.median(times[(t, DEPTHS[0])])
        row = ", ".join(
            f"{d}: {statistics.median(times[(t, d)]) * 1e3:.2f} ms (x{statistics.median(times[(t, d)]) / base:.3f})"
            for d in DEPTHS
        )
        print(f"{t} thread{'s' if t > 1 else ''}: {row}")


if __name__ == "__main__":
    main()
