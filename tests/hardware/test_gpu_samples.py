"""Live readings for the meters, driven by scripted fake sessions."""

from __future__ import annotations

import os

from testkit.fake_nvml import (
    GIB,
    FakeClock,
    FakeGpu,
    FakeNvml,
    FakeProcess,
    FakeReading,
    hold,
    ramp,
)
from vrampilot.hardware import nvml_session, read_gpu_sample

PID = 4242
IDLE = FakeReading()
LOADED = FakeReading(
    memory_used_bytes=7 * GIB + 512 * 1024**2,
    pcie_rx_kb_per_s=12_000_000,
    processes=(FakeProcess(PID, 7 * GIB),),
)
DECODING = LOADED.with_(
    pcie_rx_kb_per_s=2_000,
    utilization_gpu_pct=70,
    utilization_memory_pct=92,
    clock_graphics_mhz=2520,
    clock_memory_mhz=10501,
    power_mw=310_000,
)
SPILLING = DECODING.with_(
    memory_used_bytes=8 * GIB,
    utilization_gpu_pct=12,
    utilization_memory_pct=8,
    pcie_rx_kb_per_s=9_000_000,
    pcie_tx_kb_per_s=3_000_000,
)


def _session() -> tuple[FakeReading, ...]:
    return ramp(IDLE.with_(processes=(FakeProcess(PID, 0),)), LOADED, steps=5) + hold(DECODING, 3) + hold(SPILLING, 2)


def test_scripted_session_by_tick() -> None:
    nvml = FakeNvml([FakeGpu(name="NVIDIA GeForce RTX 4060", memory_total_bytes=8 * GIB, readings=_session())])
    samples = []
    with nvml_session(nvml):
        for _ in range(12):  # runs past the end: the last reading holds
            samples.append(read_gpu_sample(nvml, 0, pid=PID))
            nvml.tick()
    assert not nvml.initialized
    used = [u for s in samples if (u := s.memory_used_bytes) is not None]
    assert len(used) == len(samples)
    assert used[:5] == sorted(used[:5]) and used[0] < used[4]  # VRAM rises during load
    assert samples[4].process_memory_used_bytes == 7 * GIB
    assert samples[6].utilization_memory_pct == 92 and samples[6].power_w == 310.0
    assert samples[9].memory_free_bytes == 0 and samples[9].pcie_tx_kb_per_s == 3_000_000
    assert samples[11] == samples[9]


def test_scripted_session_by_clock() -> None:
    clock = FakeClock()
    nvml = FakeNvml([FakeGpu(readings=_session(), step_s=0.5)], clock=clock)
    with nvml_session(nvml):
        assert read_gpu_sample(nvml, 0, pid=PID).utilization_gpu_pct == 0
        clock.advance(2.6)  # reading 5: decoding
        assert read_gpu_sample(nvml, 0, pid=PID).utilization_gpu_pct == 70
        clock.advance(100)
        assert read_gpu_sample(nvml, 0, pid=PID).utilization_gpu_pct == 12


def test_sample_fields_and_unsupported() -> None:
    reading = FakeReading(processes=(FakeProcess(os.getpid(), GIB), FakeProcess(1, 2 * GIB)), temperature_c=61)
    gpu = FakeGpu(
        readings=(reading,),
        unsupported=frozenset({"nvmlDeviceGetPowerUsage", "nvmlDeviceGetPcieThroughput"}),
    )
    nvml = FakeNvml([gpu])
    with nvml_session(nvml):
        s = read_gpu_sample(nvml, 0)
    assert s.process_memory_used_bytes == GIB  # our pid only
    assert s.temperature_c == 61
    assert s.memory_total_bytes == 24 * GIB
    assert s.power_w is None and s.pcie_rx_kb_per_s is None and s.pcie_tx_kb_per_s is None
    assert s.clock_graphics_mhz == 210 and s.clock_memory_mhz == 405


def test_process_memory_unknown_on_wddm_or_unlisted() -> None:
    gpu = FakeGpu(readings=(FakeReading(processes=(FakeProcess(PID, None),)),))
    nvml = FakeNvml([gpu])
    with nvml_session(nvml):
        assert read_gpu_sample(nvml, 0, pid=PID).process_memory_used_bytes is None
        assert read_gpu_sample(nvml, 0, pid=PID + 1).process_memory_used_bytes is None


def test_ramp_endpoints() -> None:
    r = ramp(IDLE, LOADED, steps=3)
    assert r[0].memory_used_bytes == IDLE.memory_used_bytes
    assert r[-1] == LOADED
    assert ramp(IDLE, LOADED, steps=1) == (LOADED,)
