"""A real llama-server's resident memory under a full prompt cache stays within the plan (issue 57).

The plan leaves a few MiB of the host budget for llama-server's prompt cache (--cache-ram); the
server runs with the plan's own line, distinct prompts fill the cache until llama-server evicts
to keep to its limit, and the peak RSS sampled meanwhile must not pass the plan's host total under
llama-server (the engine's buffers, the mapped weights, the cache and the process). Before the plan
counted the server, the line carried no --cache-ram: llama-server's default 8 GiB cache then grows
past any host budget smaller than that (bench/server_ram.py shows it at larger sizes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.machines import cpu_machine
from testkit.server_ram import fill_cache, plan_with_cache
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.units import MIB

pytestmark = pytest.mark.slow


def test_peak_rss_with_a_full_prompt_cache_stays_within_the_plan(embedded_model: Path) -> None:
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    # 512 cells; each prompt of about 120 tokens leaves a state of ~2.7 MiB, so 8 MiB hold three.
    p = plan_with_cache(load_model_spec(embedded_model), target, Pins(n_ctx=512, n_threads=1, n_threads_batch=1), 8)
    assert p.settings.cache_ram_mib == 8
    run = fill_cache(p, words=60, after_full=2, max_prompts=40)
    assert run.evictions >= 2, f"the cache never filled in {run.prompts} prompts"
    assert run.peak_rss_bytes <= run.planned_host_bytes, (
        f"peak RSS {run.peak_rss_bytes / MIB:.1f} MiB above the plan's {run.planned_host_bytes / MIB:.1f} MiB"
    )
