"""Calibrate the CPU speed model against llama.cpp on this machine.

Baseline measured in the same run: this machine's memory read bandwidth (numpy summing a large
array, one pass per thread count is not needed: llama.cpp decodes with all physical cores) and its
matrix throughput. Then llama.cpp's real decode and prefill speed on the embedded model, the
planner's prediction for the same settings, and the ratios. The printed efficiency factors are
what vrampilot/planner/speed.py should use on a machine like this one.

Run: .venv/bin/python bench/speed.py [--model PATH] [--tokens 64]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vrampilot.export import llama_cpp_kwargs
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.paths import embedded_model_path
from vrampilot.planner.search import Pins, plan
from vrampilot.planner.target import target_cpu_only


def measure_read_bandwidth_gbps(n_bytes: int = 1 << 30, repeats: int = 3) -> float:
    a = np.ones(n_bytes // 8, dtype=np.float64)
    a.sum()  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t)
    return n_bytes / best / 1e9


def measure_llama(path: Path, kwargs: dict, n_tokens: int) -> tuple[float, float]:
    from vrampilot import llamacpp

    llm = llamacpp.load().Llama(str(path), verbose=False, **kwargs)
    prompt = llm.tokenize(("The history of the city is long and full of change. " * 40).encode())[:480]
    llm.reset()
    t = time.perf_counter()
    llm.eval(prompt)
    prefill_tps = len(prompt) / (time.perf_counter() - t)
    llm.reset()
    llm.eval(prompt[:8])
    t = time.perf_counter()
    for _ in range(n_tokens):
        tok = llm.sample(temp=0.0)
        llm.eval([tok])
    decode_tps = n_tokens / (time.perf_counter() - t)
    del llm
    return decode_tps, prefill_tps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None, help="pin the thread count (default: the plan's)")
    args = ap.parse_args()
    path = args.model or embedded_model_path()
    if path is None:
        print("embedded model not installed", file=sys.stderr)
        return 2
    spec = load_model_spec(path)
    machine = detect_machine()
    target = target_cpu_only(machine)
    p = plan(spec, target, Pins(n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads))
    bw = measure_read_bandwidth_gbps()
    decode, prefill = measure_llama(path, llama_cpp_kwargs(p.settings), args.tokens)
    bytes_per_token = p.speed.host_bytes_per_token
    achieved = bytes_per_token * decode / 1e9
    print(f"model            {spec.display_name} ({path.name})")
    print(f"settings         threads {p.settings.n_threads}, ctx {p.settings.n_ctx}, ubatch {p.settings.n_ubatch}")
    print(f"baseline         numpy read bandwidth {bw:.1f} GB/s (this run)")
    print(f"llama.cpp        decode {decode:.1f} tok/s, prefill {prefill:.1f} tok/s")
    print(f"planner          decode {p.speed.decode_tps:.1f} tok/s, prefill {p.speed.prefill_tps:.1f} tok/s")
    print(f"bytes per token  {bytes_per_token / 1e6:.1f} MB -> achieved {achieved:.2f} GB/s")
    print(f"ratio            achieved / baseline bandwidth = {achieved / bw:.3f}")
    print(f"ratio            predicted / measured decode   = {p.speed.decode_tps / decode:.2f}")
    print(f"ratio            predicted / measured prefill  = {p.speed.prefill_tps / prefill:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
