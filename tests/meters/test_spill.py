"""Planned spill, the spill check on scripted sessions, and the one-click re-plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from testkit.fake_nvml import FakeClock, FakeNvml
from tests.meters.session import (
    GPU,
    SHARED_SPILLED,
    ScriptedSharedMemory,
    Session,
    gpu8,
    script,
    session,
    shared_script,
)
from vrampilot.gguf import ModelSpec
from vrampilot.meters.sampler import Sampler
from vrampilot.meters.spill import (
    SYSMEM_FALLBACK_ADVICE,
    spill_summary,
    suggest_replan,
)
from vrampilot.meters.state import MeterState
from vrampilot.meters.winshared import NOT_WINDOWS, open_shared_memory_reader
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.units import MIB, format_bytes

PROCESS = 6_700 * MIB  # what the card reports for this app: the plan's 6.44 GiB plus the CUDA context


def test_summary_full_offload(plan8: Plan) -> None:
    s = spill_summary(plan8)
    assert (s.host_layers, s.output_on_host, s.kv_host_bytes, s.host_share) == (0, False, 0, 0.0)
    assert "Everything the model reads per token is in VRAM" in s.lines()[0]


def test_summary_partial_offload(qwen7b_spec: ModelSpec) -> None:
    p = plan(qwen7b_spec, gpu8(), Pins(n_ctx=65536, type_k="f16", type_v="f16"))
    s = spill_summary(p)
    n_host = qwen7b_spec.n_layer + 1 - p.settings.n_gpu_layers
    assert s.host_layers == n_host and not s.output_on_host
    assert s.kv_host_bytes == p.memory.host.kv_bytes > 0
    assert s.host_share == pytest.approx(
        p.speed.host_bytes_per_token / (p.speed.host_bytes_per_token + p.speed.device_bytes_per_token)
    )
    text = " ".join(s.lines())
    assert f"{n_host} of 28 layers" in text and "KV cache" in text and "read from system memory" in text


def test_replan_frees_what_it_says(plan8: Plan) -> None:
    r = suggest_replan(plan8, 512 * MIB)
    assert r is not None and r.label == "q8_0 KV cache"
    assert (r.pins.type_k, r.pins.type_v, r.pins.flash_attn) == ("q8_0", "q8_0", True)
    # Applying the pins gives the same settings with the change, and the memory it promised.
    again = plan(plan8.spec, plan8.target, r.pins)
    assert again.settings == plan8.settings.with_(type_k="q8_0", type_v="q8_0")
    assert plan8.memory.device.total_bytes - again.memory.device.total_bytes == r.frees_bytes >= 768 * MIB


def test_replan_escalates(plan8: Plan) -> None:
    # More than q8_0 alone frees: q8_0 plus less context, then fewer layers.
    bigger = suggest_replan(plan8, 1000 * MIB)
    assert bigger is not None and bigger.label == "q8_0 KV cache, 16K context"
    assert bigger.pins.n_ctx == 16384 and bigger.frees_bytes >= 1256 * MIB
    layers = suggest_replan(plan8, 3000 * MIB)
    assert layers is not None and "fewer GPU layers" in layers.label
    assert layers.pins.n_gpu_layers is not None and layers.pins.n_gpu_layers < 29


def _run(s: Session, state: MeterState, n: int) -> None:
    for _ in range(n):
        s.step()
        latest = s.sampler.latest()
        assert latest is not None
        state.update(latest)


def _scripted(plan8: Plan, *, spill: bool, windows: bool) -> tuple[Session, MeterState]:
    s = session(PROCESS, spill=spill, windows=windows)
    state = MeterState(clock=s.clock, platform="win32" if windows else "linux")
    state.set_plan(plan8)
    _run(s, state, 2 + 6)  # idle, load
    return s, state


def test_healthy_session_no_warning(plan8: Plan) -> None:
    s, state = _scripted(plan8, spill=False, windows=True)
    _run(s, state, 8)
    a = state.record_decode(41.0, duration_s=4)  # 83% of the planned 49.4
    assert a.level == "ok" and not a.warning and a.replan is None
    assert "as planned" in a.text
    _run(s, state, 8)
    assert state.record_decode(40.0, duration_s=4).level == "ok"


def test_spill_on_windows_warns_and_suggests(plan8: Plan) -> None:
    s, state = _scripted(plan8, spill=True, windows=True)
    _run(s, state, 8)
    assert state.record_decode(41.0, duration_s=4).level == "ok"
    _run(s, state, 8)  # spill episode: VRAM full, shared memory +512 MiB, PCIe 12 GB/s
    a = state.record_decode(9.5, duration_s=4)
    assert a.level == "spill" and a.warning
    assert a.evidence is not None
    assert a.evidence.shared_rise_bytes == SHARED_SPILLED - 40 * MIB == 512 * MIB
    assert a.evidence.pcie_kb_per_s == 12_000_000
    expected = plan8.speed.decode_tps
    assert f"9.5 tokens/s, {9.5 / expected:.0%} of the planned {expected:.1f}" in a.text
    assert "shared GPU memory grew by 512.00 MiB" in a.text and "PCIe carries 12.0 GB/s" in a.text
    assert "spilled out of VRAM" in a.text
    assert SYSMEM_FALLBACK_ADVICE in a.text and "Prefer No Sysmem Fallback" in a.text
    assert a.replan is not None and a.replan.label == "q8_0 KV cache"
    assert f"suggested: q8_0 KV cache, frees {format_bytes(a.replan.frees_bytes)}" in a.text


def test_spill_on_linux_by_pcie_alone(plan8: Plan) -> None:
    s, state = _scripted(plan8, spill=True, windows=False)
    _run(s, state, 16)
    a = state.record_decode(9.5, duration_s=4)
    assert a.level == "spill"
    assert a.evidence is not None and a.evidence.shared_bytes is None
    assert "PCIe carries 12.0 GB/s" in a.text and "shared GPU memory" not in a.text
    assert "Sysmem Fallback" not in a.text  # Windows-only advice
    assert a.replan is not None


def test_slow_without_spill_signs(plan8: Plan) -> None:
    s, state = _scripted(plan8, spill=False, windows=True)
    _run(s, state, 16)
    a = state.record_decode(12.0, duration_s=4)
    assert a.level == "slow" and a.replan is None
    assert "show no spill" in a.text and "67 °C" in a.text


def test_long_context_is_not_a_spill(plan8: Plan) -> None:
    s, state = _scripted(plan8, spill=False, windows=False)
    _run(s, state, 8)
    # 31K tokens in the cache: the plan itself expects ~35 tokens/s there, so 25 is within reason.
    assert state.record_decode(25.0, context_tokens=31_000, duration_s=4).level == "ok"
    assert state.record_decode(25.0, duration_s=4).level == "slow"  # the same speed on an empty cache is not


def test_an_integrated_gpu_filling_shared_memory_is_not_a_spill(plan8: Plan) -> None:
    # Windows counts an integrated GPU's memory as shared GPU memory: the model fills it at load.
    igpu = replace(plan8, target=replace(plan8.target, gpus=tuple(replace(g, kind="igpu") for g in plan8.target.gpus)))
    nvml = FakeNvml([replace(GPU, readings=script(PROCESS, spill=False))])  # no PCIe rise
    clock = FakeClock(1000.0)
    shared = ScriptedSharedMemory(nvml, shared_script(spill=True))  # +512 MiB of shared memory
    s = Session(nvml, clock, Sampler(interval_s=0.5, history_s=300.0, nvml=nvml, shared_reader=shared, clock=clock))
    state = MeterState(clock=clock, platform="win32")
    state.set_plan(igpu)
    _run(s, state, 2 + 6 + 16)
    a = state.record_decode(9.5, duration_s=4)
    assert a.level == "slow" and a.replan is None and "spilled" not in a.text
    assert "integrated GPU's memory is system RAM" in a.text
    # The same readings on a discrete card are a spill.
    state.set_plan(plan8)
    assert state.record_decode(9.5, duration_s=4).level == "spill"


def test_cpu_only_plan_never_spills(qwen7b_spec: ModelSpec) -> None:
    from testkit.machines import cpu_machine
    from vrampilot.planner.target import TargetRequest, resolve_target

    p = plan(qwen7b_spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=4096))
    state = MeterState()
    state.set_plan(p)
    assert state.record_decode(0.5).level == "ok"
    assert spill_summary(p).lines() == ["CPU-only plan: the whole model is read from system memory."]


def test_shared_memory_reader_elsewhere() -> None:
    reader = open_shared_memory_reader(1234, platform="linux")
    assert reader.read() is None and reader.reason == NOT_WINDOWS
