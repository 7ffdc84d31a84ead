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
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HEAD_DIM, N_HEAD = 64, 8
DEPTHS = (512, 1024, 2048, 4096, 8192)
SHAPES = ((512, 8), (512, 2), (128, 8))  # (queries, KV heads)
THREADS = (1, 2)


def time_attention(cpu: Any, n_q: int, n_kv: int, n_head_kv: int, threads: int) -> float:
    from vrampilot.llamacpp.ggml import F16

    timing = cpu.flash_attn(F16, HEAD_DIM, n_q, n_kv, N_HEAD, [threads], repeats=2, n_head_kv=n_head_kv)
    return float(timing[0].seconds)


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
