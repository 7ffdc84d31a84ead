"""Achieved bandwidth = bytes read per token x tokens/s, checked by hand."""

from __future__ import annotations

import pytest

from testkit.fake_nvml import FakeGpu, FakeNvml
from tests.meters.session import GPU, PEAK_GBPS, gpu8
from vrampilot.gguf import ModelSpec
from vrampilot.hardware import detect_nvidia_gpus
from vrampilot.meters.bandwidth import (
    BandwidthReading,
    achieved_bandwidth,
    device_peak,
    expected_decode_tps,
    token_bytes,
)
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan


def test_hand_computed_case() -> None:
    # 4.0 GB in VRAM and 0.5 GB in system RAM per token, at 50 tokens/s:
    # GPU 4.0e9 * 50 = 200e9 B/s = 200 GB/s, 200 / 288 = 69.4% of peak;
    # host 0.5e9 * 50 = 25 GB/s, 25 / 50 = 50% of the host's bandwidth.
    r = BandwidthReading(
        time_s=0.0,
        decode_tps=50.0,
        context_tokens=None,
        device_bytes_per_token=4_000_000_000,
        host_bytes_per_token=500_000_000,
        device_peak_gbps=288.0,
        device_peak_source="nvml",
        host_peak_gbps=50.0,
    )
    assert r.device_gbps == pytest.approx(200.0)
    assert r.device_share_of_peak == pytest.approx(0.6944, abs=1e-4)
    assert r.host_gbps == pytest.approx(25.0)
    assert r.host_share_of_peak == pytest.approx(0.5)


def test_plan_bytes_per_token_by_hand(plan8: Plan) -> None:
    # Full offload at 32K: a token reads every weight in VRAM once (blocks and output layer; the
    # token embedding row on the host is a lookup, not a read of the matrix) plus one KV cell per layer.
    mem = plan8.memory
    assert plan8.settings.n_gpu_layers == plan8.spec.n_layer + 1
    kv_cell = mem.kv.total_bytes // mem.kv.n_cells  # 28 layers * (512 K + 512 V) * 2 bytes = 57344
    assert kv_cell == 28 * 2 * 4 * 128 * 2
    tb = token_bytes(plan8)
    assert tb.device_bytes == mem.device.weights_bytes + kv_cell
    assert tb.host_bytes == 0 and tb.host_share == 0.0
    r = achieved_bandwidth(plan8, 40.0, time_s=1.0, devices=())
    # 4 370 616 320 B * 40 /s = 174.82 GB/s against the target's assumed 288 GB/s.
    assert r.device_gbps == pytest.approx(tb.device_bytes * 40 / 1e9)
    assert 170 < r.device_gbps < 180
    assert r.device_peak_gbps == pytest.approx(288.0) and r.device_peak_source == "plan"


def test_peak_from_nvml_bus_and_clock(plan8: Plan) -> None:
    det = detect_nvidia_gpus(FakeNvml([GPU]))
    peak = device_peak(plan8, det.gpus)
    assert peak is not None and peak.source == "nvml"
    assert peak.gbps == pytest.approx(PEAK_GBPS)  # 128 bit / 8 * 9001 MHz * 2 = 288.0 GB/s
    r = achieved_bandwidth(plan8, 50.0, time_s=0, devices=det.gpus)
    assert r.device_share_of_peak == pytest.approx(r.device_bytes_per_token * 50 / 1e9 / PEAK_GBPS)
    rtx4090 = detect_nvidia_gpus(FakeNvml([FakeGpu()])).gpus
    assert device_peak(None, rtx4090).gbps == pytest.approx(1008.1, abs=0.1)  # type: ignore[union-attr]  # a known GPU has a peak


def test_context_fill_reads_more_kv(plan8: Plan) -> None:
    start = token_bytes(plan8)
    mid = token_bytes(plan8, 16384)
    kv_cell = plan8.memory.kv.total_bytes // plan8.memory.kv.n_cells
    assert mid.device_bytes - start.device_bytes == 16383 * kv_cell
    # Expected speed falls from the empty-context prediction to the full-context one, not below.
    assert expected_decode_tps(plan8) == pytest.approx(plan8.speed.decode_tps)
    assert expected_decode_tps(plan8, 32768) == pytest.approx(plan8.speed.decode_tps_full_ctx)
    assert plan8.speed.decode_tps_full_ctx < expected_decode_tps(plan8, 16384) < plan8.speed.decode_tps


def test_partial_offload_splits_bytes(qwen7b_spec: ModelSpec) -> None:
    p = plan(qwen7b_spec, gpu8(), Pins(n_ctx=65536, type_k="f16", type_v="f16"))
    assert p.settings.n_gpu_layers < qwen7b_spec.n_layer + 1
    tb = token_bytes(p)
    assert tb.host_bytes > 0 and tb.device_bytes > 0
    r = achieved_bandwidth(p, 10.0, time_s=0)
    assert r.host_gbps == pytest.approx(tb.host_bytes * 10 / 1e9)
    assert r.host_peak_gbps == p.target.host_bandwidth_gbps


def test_the_host_peak_is_the_measured_ram_read_rate_once_the_machine_was_measured(qwen7b_spec: ModelSpec) -> None:
    from testkit.machines import cpu_machine, measured_target, uniform_probe
    from vrampilot.planner.target import TargetRequest, resolve_target

    pins = Pins(n_ctx=4096)
    measured = achieved_bandwidth(
        plan(qwen7b_spec, measured_target(TargetRequest(cpu_only=True), uniform_probe(12.5)), pins),
        5.0,
        time_s=0,
    )
    assert measured.host_peak_gbps == 25.0  # the probe's best RAM read (uniform_probe: 2 x 12.5)
    assert measured.host_peak_source == "measured 2026-12-01"
    assumed = achieved_bandwidth(
        plan(qwen7b_spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), pins), 5.0, time_s=0
    )
    assert assumed.host_peak_gbps == 50.0 and assumed.host_peak_source == "assumed"
