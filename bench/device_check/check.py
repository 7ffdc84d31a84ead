"""On the GPU machine: llama.cpp's real allocations on the device (CUDA or Vulkan) against the
planner's predictions, the planner's back-off for a device budget smaller than the model against
the real buffers, decode and prefill through llama-server against llama-bench, and NVML's view of
the server process.

Standard library only (nothing of the app is installed there): the predictions come in
expected.json (bench/device_check/prepare.py), llama.cpp's buffer lines are read with
vrampilot/llamacpp/buffer_log.py from this repository. Writes results.json and prints a table:

    python3 bench/device_check/check.py --bin BUILD/bin --payload bench/out/device --out OUT
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vrampilot.llamacpp import MIB, device_buffers  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_argv(binary: Path, model: Path, args: list[str], port: int) -> list[str]:
    """llama-server with the flags prepare.py took from the one builder (vrampilot.export), and its
    load log at info level (the buffer lines)."""
    return [str(binary), "-m", str(model), *args, "--host", "127.0.0.1", "--port", str(port), "-lv", "4"]


def start(argv: list[str], timeout_s: float = 180) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if "listening on" in line or time.monotonic() > deadline:
            break
    return proc, lines


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def prefill_tps(port: int, n_prompt: int = 512) -> float:
    """Prompt tokens per second for one prompt of n_prompt token ids (no prompt cache)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"prompt": [1 + i % 200 for i in range(n_prompt)], "n_predict": 1, "cache_prompt": False}
    conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    data = json.loads(conn.getresponse().read())
    conn.close()
    return float(data["timings"]["prompt_per_second"])


def bench_tps(binary: Path, model: Path, *, prompt: int, gen: int) -> float | None:
    out = subprocess.run(
        [
            str(binary),
            "-m",
            str(model),
            "-p",
            str(prompt),
            "-n",
            str(gen),
            "-ngl",
            "99",
            "-fa",
            "1",
            "-r",
            "3",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        return float(json.loads(out.stdout)[0]["avg_ts"])
    except (ValueError, IndexError, KeyError):
        return None


def decode_tps(port: int, n: int = 128) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {
        "prompt": [1, 2, 3, 4],
        "n_predict": n,  # token ids: the fixtures have no tokenizer to read text with "ignore_eos": True, "samplers": ["top_k"], "top_k": 1,
        "cache_prompt": False,
    }
    conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    data = json.loads(conn.getresponse().read())
    conn.close()
    return float(data["timings"]["predicted_per_second"])


def nvml_process_bytes(pid: int) -> int | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for row in out.splitlines():
        parts = [p.strip() for p in row.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return int(parts[1]) * MIB
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--payload", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--device", default="CUDA0", help="the buffer name of the device (CUDA0, Vulkan0, ...)")
    ap.add_argument("--cases", default="cases", help="which predictions of expected.json: cases (CUDA0), vulkan_cases")
    ap.add_argument("--max-cases", type=int, default=0)
    args = ap.parse_args()
    expected = json.loads((args.payload / "expected.json").read_text())
    cases = expected[args.cases]
    if args.max_cases:
        cases = cases[: args.max_cases]
    results = []
    print(
        f"{'model':<10} {'ngl':>4} {'ctx':>6} {'ub':>5} {'kv':<5} {'weights':>9} {'kv %':>7} {'compute %':>10} "
        f"{'host %':>8} {'nvml/llama':>10}"
    )
    for c in cases:
        model = args.payload / c["model"] if not Path(c["model"]).is_absolute() else Path(c["model"])
        port = free_port()
        proc, lines = start(server_argv(args.bin / "llama-server", model, c["args"], port))
        real = device_buffers(lines)
        nvml = nvml_process_bytes(proc.pid)
        stop(proc)
        e = c["expected"]

        def pct(measured: int, predicted: int) -> float | None:
            return None if not measured else 100.0 * (predicted - measured) / measured

        dev = args.device
        host_compute = sum(v for k, v in real["compute"].items() if k != dev)
        held = sum(real[k].get(dev, 0) for k in ("model", "kv", "compute"))
        row = {
            "case": c,
            "measured": real,
            "nvml_process_bytes": nvml,
            "weights_diff_bytes": real["model"].get(dev, 0) - e["weights"],
            "kv_pct": pct(real["kv"].get(dev, 0), e["kv"]),
            "compute_pct": pct(real["compute"].get(dev, 0), e["compute"]),
            "host_compute_pct": pct(host_compute, e["host_compute"]),
            "nvml_over_llama": (nvml / held) if nvml and held else None,
        }
        results.append(row)
        s = c["settings"]

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:+.1f}"

        print(
            f"{c['name']:<10} {s['n_gpu_layers']:>4} {s['n_ctx']:>6} {s['n_ubatch']:>5} {s['type_k']:<5} "
            f"{row['weights_diff_bytes'] / MIB:>+8.2f}M {f(row['kv_pct']):>7} {f(row['compute_pct']):>10} "
            f"{f(row['host_compute_pct']):>8} {row['nvml_over_llama'] or 0:>10.3f}",
            flush=True,
        )
    # The planner's back-off: its choice for a device with room for half the layers, on the real device.
    backoff = []
    for c in expected.get("backoff_cases", []) if args.cases == "cases" else []:
        port = free_port()
        proc, lines = start(server_argv(args.bin / "llama-server", args.payload / c["model"], c["args"], port))
        real = device_buffers(lines)
        stop(proc)
        held = sum(real[k].get(args.device, 0) for k in ("model", "kv", "compute"))
        planned = sum(c["expected"][k] for k in ("weights", "kv", "compute"))
        row = {
            "case": c,
            "measured": real,
            "held_bytes": held,
            "planned_bytes": planned,
            "within_budget": held <= c["budget_bytes"],
        }
        backoff.append(row)
        s = c["settings"]
        print(
            f"back-off {c['name']}: budget {c['budget_bytes'] / MIB:.1f} MiB, plan -ngl {s['n_gpu_layers']} "
            f"--n-cpu-moe {s.get('n_cpu_moe', 0)} ctx {s['n_ctx']}: planned {planned / MIB:.1f} MiB, "
            f"held {held / MIB:.1f} MiB, {'within' if row['within_budget'] else 'OVER'} the budget",
            flush=True,
        )
    # Decode and prefill: the served model through the API against llama-bench, same build.
    speed = []
    for name in sorted({c["model"] for c in cases if c.get("serves")}):
        model = args.payload / name
        b_decode = bench_tps(args.bin / "llama-bench", model, prompt=0, gen=128)
        b_prefill = bench_tps(args.bin / "llama-bench", model, prompt=512, gen=0)
        if b_decode is None or b_prefill is None:
            continue
        port = free_port()
        proc, _ = start(server_argv(args.bin / "llama-server", model, expected["speed_args"], port))
        try:
            decode_tps(port, 16)
            served = sorted(decode_tps(port) for _ in range(3))[1]
            served_prefill = sorted(prefill_tps(port) for _ in range(3))[1]
        finally:
            stop(proc)
        speed.append(
            {
                "model": name,
                "llama_bench_tps": b_decode,
                "served_tps": served,
                "ratio": served / b_decode,
                "llama_bench_prefill_tps": b_prefill,
                "served_prefill_tps": served_prefill,
                "prefill_ratio": served_prefill / b_prefill,
            }
        )
        print(
            f"decode {name}: llama-bench {b_decode:.1f} tok/s, served {served:.1f}, ratio {served / b_decode:.3f}; "
            f"prefill 512: llama-bench {b_prefill:.0f} tok/s, served {served_prefill:.0f}, ratio {served_prefill / b_prefill:.3f}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"allocations": results, "backoff": backoff, "speed": speed}, indent=1)
    )
    worst = max((abs(r["compute_pct"]) for r in results if r["compute_pct"] is not None), default=0.0)
    print(f"worst device compute error {worst:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
