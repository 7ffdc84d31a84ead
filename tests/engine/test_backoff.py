"""When llama.cpp cannot allocate a plan the engine backs off to the cheapest smaller alternative,
says what changed, and never leaves a half-loaded model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.engine.conftest import make_plan
from vrampilot.engine import AllocationError, Engine, Message, SamplingParams
from vrampilot.engine.backoff import next_backoff
from vrampilot.engine.loader import open_llama
from vrampilot.engine.session import Opener
from vrampilot.gguf import ModelSpec
from vrampilot.planner.plan import Plan
from vrampilot.planner.search.alternatives import backoff_cost, is_backoff
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target

if TYPE_CHECKING:
    import llama_cpp


def _failing_above(n_ctx: int, calls: list[Settings]) -> Opener:
    def opener(path: Path, settings: Settings, **kw: Any) -> llama_cpp.Llama:
        calls.append(settings)
        if settings.n_ctx > n_ctx:
            raise AllocationError(f"simulated: no room for {settings.n_ctx} tokens")
        return open_llama(path, settings, **kw)

    return opener


def test_next_backoff_picks_the_cheapest_smaller_alternative(spec: ModelSpec, cpu_target: Target) -> None:
    p = make_plan(spec, cpu_target, n_ctx=4096)
    step = next_backoff(p)
    assert step is not None
    # On the CPU the only memory-saving change allowed is a smaller context: the next power of two down.
    assert step.plan.settings.n_ctx == 2048
    assert step.change == "context 4K -> 2K"
    assert step.plan.settings.with_(n_ctx=4096) == p.settings
    candidates = [a for a in p.alternatives if is_backoff(p, a)]
    assert candidates and all(a.settings.n_ctx < 4096 for a in candidates)
    # KV-type and batch alternatives are not back-offs even when they save memory.
    assert not any(a.settings.type_k != p.settings.type_k for a in candidates)
    assert min(backoff_cost(p, a) for a in candidates) == backoff_cost(
        p, next(a for a in candidates if a.settings.n_ctx == 2048)
    )


@pytest.mark.slow
def test_load_backs_off_and_reports_what_changed(spec: ModelSpec, cpu_target: Target) -> None:
    calls: list[Settings] = []
    e = Engine(opener=_failing_above(1024, calls))
    result = e.load(make_plan(spec, cpu_target, n_ctx=4096))
    try:
        assert [s.n_ctx for s in calls] == [4096, 2048, 1024]
        assert result.changes == ("context 4K -> 2K", "context 2K -> 1K")
        assert result.backed_off and result.plan.settings.n_ctx == 1024
        assert e.loaded and e.n_ctx == 1024 and e.plan is result.plan
        r = e.chat([Message("user", "Hi")], SamplingParams(temperature=0.0, max_tokens=3))
        assert r.stats.n_ctx == 1024
    finally:
        e.unload()


def test_when_nothing_fits_nothing_stays_loaded(spec: ModelSpec, cpu_target: Target) -> None:
    calls: list[Settings] = []
    e = Engine(opener=_failing_above(0, calls), max_backoff_steps=2)
    with pytest.raises(AllocationError, match=r"after backing off: context 4K -> 2K; context 2K -> 1K"):
        e.load(make_plan(spec, cpu_target, n_ctx=4096))
    assert len(calls) == 3
    assert not e.loaded and e.plan is None


@pytest.mark.slow
def test_a_real_allocation_failure_is_a_typed_error(spec: ModelSpec, cpu_target: Target) -> None:
    # 16M tokens of KV cache is ~360 GiB: refused before llama.cpp tries (it would abort the
    # process on some of its allocations), with the numbers.
    p = make_plan(spec, cpu_target, n_ctx=1 << 24)
    e = Engine()
    e.load(make_plan(spec, cpu_target))
    assert e.loaded
    with pytest.raises(AllocationError, match=r"memory left and loading allocates \d+\.\d\d GiB"):
        e.load(p, backoff=False)
    assert not e.loaded  # the previous model was freed first, the failed one is not half-loaded


def test_a_backoff_step_keeps_what_the_failed_plan_chose(spec: ModelSpec, cpu_target: Target) -> None:
    """Only the reduced setting changes: a free re-plan at the smaller context would pick a larger
    KV cache type again, and memory would barely drop (q4_0 -> q8_0 -> f16 was seen)."""
    p = make_plan(spec, cpu_target, n_ctx=4096, type_k="q4_0", type_v="q4_0")
    assert (p.settings.type_k, p.settings.type_v) == ("q4_0", "q4_0")
    # Unpin the cache types, as if the planner had chosen q4_0 itself for this size.
    from dataclasses import replace

    from vrampilot.planner.plan import Pins

    unpinned = replace(p, pins=Pins(n_ctx=4096, n_threads=1, n_threads_batch=1))
    step = next_backoff(unpinned)
    assert step is not None
    s, t = unpinned.settings, step.plan.settings
    assert t.n_ctx < s.n_ctx
    assert (t.type_k, t.type_v, t.flash_attn, t.n_ubatch, t.n_batch) == (
        s.type_k,
        s.type_v,
        s.flash_attn,
        s.n_ubatch,
        s.n_batch,
    )
    assert _memory(step.plan) < _memory(unpinned)
    assert step.change == "context 4K -> 2K"


def _memory(p: Plan) -> int:
    return p.memory.device.total_bytes if p.target.has_gpu else p.memory.host.total_bytes
