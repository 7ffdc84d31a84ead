"""Are the built-in model's decode steps, read some seconds apart, steadier averaged? (#19)

The probe's run of the built-in model (hardware/reference_run.py) read its decode steps once, in
about a second; on a Zen 4 VM its 1-thread steps near the start read 51-81 tokens/s from one probe
to the next and every fixture's 1-thread generating followed (bench/speed.py). This loads the run's
two contexts, reads the prompt once, then times the decode steps at both depths and thread counts
(`_decode`, as the probe does) again and again with llama.cpp's kernels running for `gap` seconds
between readings (as the probe's second kernel pass does), and prints per step: the spread of one
reading (sd of the log), of the mean of two neighbouring readings, and the lag-1 correlation.

Run: .venv/bin/python bench/experiments/reference-readings-exp.py [readings 12] [gap seconds 10]
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from vrampilot.hardware import reference_run as rr
    from vrampilot.hardware.probe import _kernel_rates, stream_bytes
    from vrampilot.llamacpp import load
    from vrampilot.llamacpp.ggml import CpuKernels
    from vrampilot.paths import embedded_model_path

    readings = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    gap = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    llama_cpp = load()
    model = embedded_model_path()
    assert model is not None
    params = {"n_ctx": rr.N_CTX, "n_batch": rr.N_UBATCH, "n_ubatch": rr.N_UBATCH, "n_threads": 2, "n_threads_batch": 2,
              "flash_attn": True, "verbose": False}  # fmt: skip
    deep, shallow = llama_cpp.Llama(str(model), **params), llama_cpp.Llama(str(model), **params)
    prompt = rr._prompt(deep.n_vocab(), rr.N_UBATCH * rr.PREFILL_UBATCHES + 1)
    deep.eval(prompt[:-1])

    def kernels(seconds: float) -> None:
        t0 = time.perf_counter()
        with CpuKernels() as cpu:
            while time.perf_counter() - t0 < seconds:
                for name in ("q4_0", "q8_0", "q4_1"):
                    _kernel_rates(cpu, name, [1, 2], stream_bytes())

    rows = []
    for i in range(readings):
        steps = rr._decode(llama_cpp, [(shallow, prompt[:4], True), (deep, prompt, False)], [1, 2], 2)
        rows.append({k: 1 / s for k, s in steps.items()})
        print(i, " ".join(f"{t}T@{depth}:{v:.1f}" for (t, depth), v in sorted(rows[-1].items())), flush=True)
        kernels(gap)
    for k in sorted(rows[0]):
        v = [math.log(r[k]) for r in rows]
        pairs = [(a + b) / 2 for a, b in itertools.pairwise(v)]
        print(f"{k[0]}T at depth {k[1]}: sd of one reading {statistics.pstdev(v):.3f}, of two neighbours' mean "
              f"{statistics.pstdev(pairs):.3f}; lag-1 correlation {statistics.correlation(v[:-1], v[1:]):.2f}")  # fmt: skip
    deep.close()
    shallow.close()


if __name__ == "__main__":
    main()
