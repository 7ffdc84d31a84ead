"""Where a prompt's time goes in llama.cpp's graph, op by op (#19).

The speed model prices a prompt's ubatch as its matrix products at the probe's kernel rates plus
attention plus fixed costs per node, times the built-in model's graph factor; for the Gemma 3
fixture it came out 1.3x too fast at every prompt length (0.73-0.78 of measured at 229-1171 tokens,
1 thread), and for Q4_0 weights 1.15x. This reads one 512-token ubatch (after `past` tokens) of a
model through llama.cpp's scheduler with an eval callback that asks for every node, so each node is
computed on its own and timed: the time per op kind, and the matrix products' against the probe's
kernel rate for their weight type. The per-node launches add a few microseconds each.

Run: .venv/bin/python bench/experiments/op-profile-exp.py MODEL.gguf [threads] [past] [repeats]
"""

from __future__ import annotations

import collections
import ctypes
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from vrampilot import llamacpp
    from vrampilot.llamacpp.backends import ggml_library

    path = Path(sys.argv[1])
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    past = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    lc = llamacpp.load()
    base = ggml_library()  # ggml-base's functions come through it on Linux
    op_desc = base.ggml_op_desc
    op_desc.restype, op_desc.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    get_name = base.ggml_get_name
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    nel = base.ggml_nelements
    nel.restype, nel.argtypes = ctypes.c_int64, [ctypes.c_void_p]

    events: list[tuple[float, str, str, int]] = []
    last = [0.0]

    def cb(t: int, ask: bool, _ud: int) -> bool:
        if ask:
            return True
        now = time.perf_counter()
        events.append((now - last[0], op_desc(t).decode(), get_name(t).decode(), int(nel(t))))
        last[0] = time.perf_counter()
        return True

    callback = lc.ggml_backend_sched_eval_callback(cb)
    mp = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(str(path).encode(), mp)
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = past + 1024, 512, 512
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = 1
    cp.cb_eval = callback
    ctx = lc.llama_init_from_model(model, cp)
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = lc.llama_vocab_n_tokens(vocab)
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    walls = []
    for r in range(repeats):
        mem = lc.llama_get_memory(ctx)
        lc.llama_memory_clear(mem, True)
        pos = 0
        for chunk in ([512] * (past // 512)) + [512]:
            toks = (lc.llama_token * chunk)(*[(7 * (i + r) + 13) % n_vocab for i in range(pos, pos + chunk)])
            events.clear()
            last[0] = time.perf_counter()
            t0 = time.perf_counter()
            lc.llama_decode(ctx, lc.llama_batch_get_one(toks, chunk))
            wall = time.perf_counter() - t0
            pos += chunk
        walls.append(wall)
        if r == 0:
            continue  # warm-up
        for dt, op, name, _n in events:
            kind = op
            if op == "MUL_MAT":
                kind = "MUL_MAT " + name.split("-")[0]
            total[kind] += dt
            count[kind] += 1
    n = repeats - 1
    print(f"{path.name}: {threads} thread(s), a 512-token ubatch after {past} cells; "
          f"ubatch wall {min(walls[1:]) * 1e3:.1f} ms (with per-node launches)")  # fmt: skip
    s = sum(total.values()) / n
    for kind, t in total.most_common():
        print(f"  {kind:<28} {t / n * 1e3:8.2f} ms  {100 * t / n / s:5.1f}%  ({count[kind] // n} nodes)")
    print(f"  {'sum':<28} {s * 1e3:8.2f} ms")
    lc.llama_free(ctx)
    lc.llama_model_free(model)


if __name__ == "__main__":
    main()
