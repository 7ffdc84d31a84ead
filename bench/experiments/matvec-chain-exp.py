"""A decode step's matrix products alone, as one graph, against what the speed model prices for
them (#19): does a model of small matrices run its mat-vecs at the probe's rates?

For the built-in model and the Gemma 3 bench fixture, every layer's weight matrices (their types
and shapes from the GGUF, planner/cpu_speed.py `weight_table`) are laid out in one buffer (the
repacked one where llama.cpp would put them) and multiplied by one token's activations, each
product a node of one ggml graph, as in a real decode step (a barrier between nodes, the weights
streamed from RAM when they are larger than the last-level cache). The graph's time at 1 and 2
threads is set against the sum of bytes / the probe's mat-vec rate for each matrix (measured here
first, with the probe's own code).
Then chains of one shape each (about 40 MB), by matrix size: the rate and time per product.
Run: .venv/bin/python bench/experiments/matvec-chain-exp.py [model.gguf ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def chain_seconds(cpu: object, mats: list[tuple[str, int, int]], threads: tuple[int, ...], repeats: int) -> list[float]:
    """Best time of one graph multiplying every (type, k, n) matrix by a k-vector, per thread count."""
    from vrampilot.hardware.probe import ggml_type_id
    from vrampilot.llamacpp.ggml import F32

    api = cpu.api  # type: ignore[attr-defined]
    align = 64
    sizes = [-(-cpu.row_bytes(ggml_type_id(t), k) * n // align) * align for t, k, n in mats]  # type: ignore[attr-defined]
    kinds = sorted({ggml_type_id(t) for t, _, _ in mats})
    assert len(kinds) == 1, "one weight type per chain"
    tid = kinds[0]
    out_times: list[float] = []
    for buft in [*cpu.extra_bufts, cpu.cpu_buft]:  # type: ignore[attr-defined]
        arena = cpu._arena(buft, sum(sizes))  # type: ignore[attr-defined]
        if arena is None:
            continue
        cw, cx = cpu._context(len(mats) + 1), cpu._context(3 * len(mats) + 8)  # type: ignore[attr-defined]
        bx = 0
        try:
            xs: dict[int, int] = {}
            ws, outs = [], []
            for _t, k, n in mats:
                if k not in xs:
                    xs[k] = api.new_tensor_2d(cx, F32, k, 1)
                w = api.new_tensor_2d(cw, tid, k, n)
                ws.append((w, k, n))
                outs.append(api.mul_mat(cx, w, xs[k]))
            graph = api.new_graph(cx)
            for o in outs:
                api.build_forward_expand(graph, o)
            bx = api.alloc_ctx_tensors_from_buft(cx, cpu.cpu_buft)  # type: ignore[attr-defined]
            base = api.buffer_get_base(arena)
            ok = True
            offset = 0
            for (w, _k, _n), size in zip(ws, sizes, strict=True):
                if api.tensor_alloc(arena, w, base + offset) != 0:
                    ok = False
                    break
                offset += size
            if not ok or (buft != cpu.cpu_buft and not api.dev_supports_op(cpu.dev, outs[0])):  # type: ignore[attr-defined]
                continue
            for w, k, n in ws:
                cpu._fill(w, tid, k, n)  # type: ignore[attr-defined]
            for k, x in xs.items():
                cpu._fill(x, F32, k, 1)  # type: ignore[attr-defined]
            name = (api.buft_name(buft) or b"?").decode()
            out_times = [cpu._compute(graph, t, repeats) for t in threads]  # type: ignore[attr-defined]
            return [*out_times, name]  # type: ignore[list-item]
        finally:
            if bx:
                api.buffer_free(bx)
            api.free(cw)
            api.free(cx)
    raise RuntimeError("no buffer took the chain")


def sizes(cpu: Any) -> None:
    """Chains of one shape each, about 40 MB in all: rate and time per product by matrix size."""
    from vrampilot.hardware.probe import ggml_type_id

    total = 40 << 20
    for t in ("q4_0", "q4_1", "q8_0"):
        tid = ggml_type_id(t)
        for k, n in ((640, 256), (640, 1024), (640, 2048), (2048, 640), (640, 8192), (4096, 4096)):
            b = cpu.row_bytes(tid, k) * n
            count = max(2, min(400, total // b))
            runs = [cpu.mul_vec_chain(tid, k, n, count, (1, 2), repeats=5) for _ in range(3)]
            s1 = sorted(r[0].seconds for r in runs)[1]
            s2 = sorted(r[1].seconds for r in runs)[1]
            print(f"{t} {k}x{n} ({b / 1e3:.0f} KB) x{count} {runs[0][0].buffer}: 1T {b * count / s1 / 1e9:5.1f} GB/s "
                  f"({s1 / count * 1e6:6.1f} us each)  2T {b * count / s2 / 1e9:5.1f} GB/s ({s2 / count * 1e6:6.1f} us "
                  f"each)  2T/1T {s1 / s2:.2f}", flush=True)  # fmt: skip


def main() -> None:
    import speed as bench  # bench/speed.py

    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware.measured import HostProbe
    from vrampilot.hardware.probe import _kernel_rates, ggml_type_id, stream_bytes
    from vrampilot.llamacpp.ggml import CpuKernels
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner.cpu_speed import CpuRates, weight_table

    default = [p for p in (embedded_model_path(), bench.fixture("gemma3 SWA Q4_0")) if p is not None]
    paths = [Path(p) for p in sys.argv[1:]] or default
    threads = (1, 2)
    with CpuKernels() as cpu:
        for path in paths:
            table = weight_table(load_model_spec(path))
            by_type: dict[str, list[tuple[str, int, int]]] = {}
            for layer in table.layers:
                for m in layer.matrices:
                    if m.expert_share < 1.0:
                        continue
                    n = round(m.bytes_active / cpu.row_bytes(ggml_type_id(m.type_name), m.row))
                    by_type.setdefault(m.type_name, []).append((m.type_name, m.row, n))
            kernels = tuple(k for k in (_kernel_rates(cpu, t, threads, stream_bytes()) for t in by_type) if k)
            rates = CpuRates(HostProbe("now", 0.0, "", (), (), kernels, ()), max(threads))
            for type_name, mats in by_type.items():
                total = sum(cpu.row_bytes(ggml_type_id(t), k) * n for t, k, n in mats)
                for rnd in range(3):
                    *secs, buf = chain_seconds(cpu, mats, threads, repeats=5)
                    cells = []
                    for t, sec in zip(threads, secs, strict=True):
                        # By bytes alone (as before the probe timed a chain), then with its cost per product.
                        priced = sum(cpu.row_bytes(ggml_type_id(tt), k) * n / (rates.decode_gbps(tt, t, k) * 1e9)
                                     for tt, k, n in mats)  # fmt: skip
                        chained = priced + len(mats) * rates.matvec_overhead_s(type_name, t)
                        cells.append(f"{t}T {sec * 1e3:6.3f} ms (by bytes {priced * 1e3:6.3f}: x{sec / priced:4.2f}; "
                                     f"with the chain's cost {chained * 1e3:6.3f}: x{sec / chained:4.2f})")  # fmt: skip
                    print(f"{path.name[:26]:<26} {type_name} {len(mats)} mat-vecs, {total / 1e6:5.1f} MB in {buf}, "
                          f"round {rnd}: " + "  ".join(cells), flush=True)  # fmt: skip
        sizes(cpu)


if __name__ == "__main__":
    main()
