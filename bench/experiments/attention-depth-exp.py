"""Does a prompt's attention cost more per cell deeper in the cache? (issue #19)

Replayed over fifteen bench runs on the Zen 4 VM, the 8K-context prompts of the two full-attention
models with heads of 64 came out 1.09-1.10 of measured at 1 thread after replies (medians; 2K:
0.98-1.03), while the probe times prompt attention over 1024 cells only (hardware/probe.py
`_ATTN_SHAPES`): 256 KiB of K and V per head, which the core's L2 holds; at 8K cells it is 2 MiB.
This times llama.cpp's flash-attention kernel alone, as the engine runs it for a prompt (f16
cache, a 512-query ubatch; also the probe's 128), over 512 to 8192 cells, with 8 query heads
sharing 8 KV heads (the probe's shape) or 2 (grouped-query attention, as the fixtures), at 1 and 2
threads, in alternating rounds, and prints nanoseconds per query-cell-head (the median of the
rounds, each its best of two) and each depth against 1024 cells.

Run: .venv/bin/python bench/experiments/attention-depth-exp.py [rounds]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HEAD_DIM, N_HEAD = 64, 8
DEPTHS = (512, 1024, 2048, 4096, 8192)
SHAPES = ((512, 8), (512, 2), (128, 8))  # (queries, KV heads)
THREADS = (1, 2)


def time_attention(cpu: object, n_q: int, n_kv: int, n_head_kv: int, threads: int) -> float:
    from vrampilot.llamacpp.ggml import F16, F32

    api = cpu.api  # type: ignore[attr-defined]
    c = cpu._context(8)  # type: ignore[attr-defined]
    buf = 0
    try:
        q = api.new_tensor_4d(c, F32, HEAD_DIM, n_q, N_HEAD, 1)
        k = api.new_tensor_4d(c, F16, HEAD_DIM, n_kv, n_head_kv, 1)
        v = api.new_tensor_4d(c, F16, HEAD_DIM, n_kv, n_head_kv, 1)
        mask = api.new_tensor_4d(c, F16, n_kv, n_q, 1, 1)
        out = api.flash_attn_ext(c, q, k, v, mask, HEAD_DIM**-0.5, 0.0, 0.0)
        graph, buf = cpu._allocated_graph(c, out, "attention")  # type: ignore[attr-defined]
        cpu._fill(q, F32, HEAD_DIM, n_q * N_HEAD)  # type: ignore[attr-defined]
        cpu._fill(k, F16, HEAD_DIM, n_kv * n_head_kv)  # type: ignore[attr-defined]
        cpu._fill(v, F16, HEAD_DIM, n_kv * n_head_kv)  # type: ignore[attr-defined]
        import numpy as np

        zeros = np.zeros(int(api.nbytes(mask)) // 2, dtype=np.float16)
        api.tensor_set(mask, zeros.ctypes.data, 0, zeros.nbytes)
        return float(cpu._compute(graph, threads, 2))  # type: ignore[attr-defined]
    finally:
        if buf:
            api.buffer_free(buf)
        api.free(c)


def main() -> None:
    from vrampilot.llamacpp.ggml import CpuKernels

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    ns: dict[tuple[int, int, int, int], list[float]] = {}
    with CpuKernels() as cpu:
        for r in range(rounds):
            order = [(t, s, d) for t in THREADS for s in SHAPES for d in DEPTHS]
            if r % 2:
                order.reverse()
            for t, (n_q, n_kv_head), d in order:
                s = time_attention(cpu, n_q, d, n_kv_head, t)
                ns.setdefault((t, n_q, n_kv_head, d), []).append(s * 1e9 / (n_q * d * N_HEAD))
            print(f"round {r + 1} of {rounds} done", flush=True)
    for t in THREADS:
        for n_q, n_kv_head in SHAPES:
            med = {d: statistics.median(ns[(t, n_q, n_kv_head, d)]) for d in DEPTHS}
            cells = "  ".join(f"{d:5d}: {med[d]:.3f} ({med[d] / med[1024]:.2f})" for d in DEPTHS)
            print(f"{t}T {n_q:3d} queries, {N_HEAD} heads on {n_kv_head} KV heads, ns per query-cell-head  {cells}")


if __name__ == "__main__":
    main()
