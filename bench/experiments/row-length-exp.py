"""Mat-vec speed against row length, and in a chain of small matrices as a model's decode step runs
them (#19).

1. For each type, llama.cpp's mat-vec over weights larger than the last-level cache with rows of
   4096, 1024, 768 and 512 elements, at 1 and 2 threads (the probe measured 4096 and 1024 only:
   a row of 576, the built-in model's, was priced at the 1024-row figure).
2. A graph of many separate mat-vecs of one small shape (a small model's matrices: each its own
   weights, 96 MiB in all, so they come from RAM), computed as one graph: GB/s and time per node;
   Q4_0 also repacked (CPU_REPACK, where llama.cpp's loader puts it on x86), as the Gemma 3 fixture
   of bench/speed.py runs: small repacked matrices with 2 threads went at half to three quarters of
   the rate of one large one.

Run: .venv/bin/python bench/experiments/row-length-exp.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from vrampilot.hardware.probe import ggml_type_id, stream_bytes
    from vrampilot.llamacpp.ggml import F32, CpuKernels

    cpu = CpuKernels()
    api = cpu.api
    stream = stream_bytes()
    print("1. one matrix over", stream >> 20, "MiB, GB/s at 1 / 2 threads, by row length")
    for t in ("q4_1", "q8_0", "q4_0", "f16", "q4_k", "q6_k"):
        tid = ggml_type_id(t)
        out = []
        for row in (4096, 1024, 768, 512):
            k = max(row, cpu.block_size(tid))
            n = max(64, stream // cpu.row_bytes(tid, k) // 64 * 64)
            ts = cpu.mul_mat(tid, k, n, 1, [1, 2], repeats=3)
            out.append(f"{row}: " + " / ".join(f"{cpu.row_bytes(tid, k) * n / x.seconds / 1e9:.1f}" for x in ts))
        print(f"  {t:<5} ({ts[0].buffer})  " + "   ".join(out), flush=True)
    print("2. a chain of separate mat-vecs of one shape (k x n, row of k), 96 MiB of weights")
    repack = cpu.extra_bufts[0] if cpu.extra_bufts else None
    for t, shapes, buft in (("q4_1", [(576, 576), (576, 1536), (1536, 576), (4096, 4096)], cpu.cpu_buft),
                            ("q8_0", [(768, 128), (768, 768), (768, 2048), (4096, 4096)], cpu.cpu_buft),
                            ("f16", [(512, 128), (512, 768), (4096, 4096)], cpu.cpu_buft),
                            ("q4_0", [(640, 1024), (640, 256), (1024, 640), (640, 2048), (2048, 640), (4096, 4096)],
                             repack)):  # fmt: skip
        if buft is None:
            continue
        tid = ggml_type_id(t)
        where = (api.buft_name(buft) or b"?").decode()
        for k, n in shapes:
            one = cpu.row_bytes(tid, k) * n
            count = max(1, (96 << 20) // one)
            cw, cx = cpu._context(count + 2), cpu._context(count + 4)
            weights = [api.new_tensor_2d(cw, tid, k, n) for _ in range(count)]
            x = api.new_tensor_2d(cx, F32, k, 1)
            graph = api.new_graph(cx)
            for w in weights:
                api.build_forward_expand(graph, api.mul_mat(cx, w, x))
            bw = api.alloc_ctx_tensors_from_buft(cw, buft)
            bx = api.alloc_ctx_tensors_from_buft(cx, cpu.cpu_buft)
            try:
                for w in weights:
                    cpu._fill(w, tid, k, n)
                cpu._fill(x, F32, k, 1)
                cells = []
                for threads in (1, 2):
                    s = cpu._compute(graph, threads, 5)
                    cells.append(f"{threads}T {count * one / s / 1e9:.1f} GB/s {s / count * 1e6:.1f} us/node")
                print(f"  {t:<5} ({where}) {k}x{n} x{count}: " + "  ".join(cells), flush=True)
            finally:
                api.buffer_free(bw)
                api.buffer_free(bx)
                api.free(cw)
                api.free(cx)
    cpu.close()


if __name__ == "__main__":
    main()
