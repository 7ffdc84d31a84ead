"""VRAM by component: the plan's prediction next to measured use, this app's and other programs'."""

from __future__ import annotations

import pytest

from tests.meters.session import OTHERS, PEAK_GBPS, session
from vrampilot.meters.state import MeterState
from vrampilot.planner.plan import Plan
from vrampilot.units import GIB, MIB

PROCESS = 6_700 * MIB


def test_vram_by_component(plan8: Plan) -> None:
    s = session(PROCESS, spill=False, windows=False)
    state = MeterState(clock=s.clock)
    state.set_plan(plan8)
    s.step(2 + 6 + 2)
    readout = state.update(s.sampler.latest())  # type: ignore[arg-type]  # the sampler has a sample by now
    (v,) = readout.vram
    assert v.name == "NVIDIA GeForce RTX 4060 Ti" and v.total_bytes == 8 * GIB
    assert v.process_bytes == PROCESS and v.process_source == "nvml"
    assert v.others_bytes == OTHERS
    assert v.free_bytes == 8 * GIB - OTHERS - PROCESS
    dev = plan8.memory.device
    assert v.planned is not None
    assert (v.planned.weights_bytes, v.planned.kv_bytes, v.planned.margin_bytes) == (
        dev.weights_bytes,
        dev.kv_bytes,
        dev.margin_bytes,
    )
    assert v.planned.compute_bytes == dev.compute_bytes + dev.output_bytes
    assert v.planned.total_bytes == dev.total_bytes
    # Measured within a few hundred MiB of the plan: the CUDA context the plan leaves to its margin.
    assert 0 < PROCESS - v.planned.used_bytes < 512 * MIB
    assert readout.planned_decode_tps == pytest.approx(plan8.speed.decode_tps)
    assert readout.plan_threads == plan8.settings.n_threads
    assert readout.memory_controller_pct == 91
    ram = readout.ram
    assert ram.planned_host_bytes == plan8.memory.host.total_bytes
    assert ram.process_bytes + ram.others_bytes + ram.available_bytes == ram.total_bytes


def test_bandwidth_in_readout_uses_nvml_peak(plan8: Plan) -> None:
    s = session(PROCESS, spill=False, windows=False)
    state = MeterState(clock=s.clock)
    state.set_plan(plan8)
    s.step(12)
    state.update(s.sampler.latest())  # type: ignore[arg-type]  # the sampler has a sample by now
    state.record_decode(40.0, duration_s=3)
    readout = state.refresh()
    assert readout is not None and readout.bandwidth is not None
    bw = readout.bandwidth
    assert bw.device_peak_source == "nvml" and bw.device_peak_gbps == pytest.approx(PEAK_GBPS)
    assert bw.device_gbps == pytest.approx(plan8.speed.device_bytes_per_token * 40 / 1e9)
    assert len(state.decode_history()) == 1
    state.set_plan(plan8)  # a new plan: old speeds belong to old settings
    assert state.decode_history() == [] and state.assessment.level == "idle"


def test_windows_dedicated_usage_fills_in_for_wddm(plan8: Plan) -> None:
    # Under WDDM NVML lists the process without its memory; Windows' counters have it.
    from dataclasses import replace

    from vrampilot.meters.types import SharedGpuMemory

    s = session(PROCESS, spill=False, windows=False)
    s.step(9)
    sample = s.sampler.latest()
    assert sample is not None
    gpu = replace(sample.gpus[0], process_memory_used_bytes=None)
    wddm = replace(sample, gpus=(gpu,), shared=SharedGpuMemory(shared_bytes=40 * MIB, dedicated_bytes=PROCESS))
    state = MeterState(clock=s.clock)
    (v,) = state.update(wddm).vram
    assert v.process_bytes == PROCESS and v.process_source == "windows counters"
    assert v.others_bytes == OTHERS


def test_history_is_bounded(plan8: Plan) -> None:
    s = session(PROCESS, spill=False, windows=False)
    state = MeterState(clock=s.clock, history_s=5.0)
    for _ in range(30):
        s.step()
        state.update(s.sampler.latest())  # type: ignore[arg-type]  # the sampler has a sample by now
    samples = state.samples()
    assert samples[-1].time_s - samples[0].time_s <= 5.0 and len(samples) == 11
