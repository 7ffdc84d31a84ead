"""The sampler: real psutil readings on this machine, scripted NVML sessions, the thread, the CLI."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time

import psutil
import pytest

from testkit.fake_nvml import GIB, MIB, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml
from tests.meters.session import OTHERS, PEAK_GBPS, session
from vrampilot.cli import main as cli_main
from vrampilot.meters.report import format_sample, sample_to_dict
from vrampilot.meters.sampler import Sampler


def test_real_psutil_readings() -> None:
    no_gpu = FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    started = time.monotonic()
    with Sampler(nvml=no_gpu) as sampler:
        ballast = bytearray(64 * MIB)  # touched pages: RSS must grow by about this much
        ballast[::4096] = b"x" * len(ballast[::4096])
        end = time.process_time() + 0.3
        while time.process_time() < end:  # busy: CPU% must show it
            pass
        sample = sampler.sample_once()
    wall_s = time.monotonic() - started
    me = psutil.Process()
    h = sample.host
    assert sample.pid == os.getpid()
    assert abs(h.process_rss_bytes - me.memory_info().rss) < 32 * MIB
    assert h.process_rss_bytes > 64 * MIB
    assert h.ram_total_bytes == psutil.virtual_memory().total
    assert 0 < h.ram_available_bytes <= h.ram_total_bytes
    assert h.process_threads == me.num_threads()
    # At least the 0.3 s of CPU this test spent, over the wall time it took (on a busy machine
    # that is long, so the share is small: what counts is that the meter saw the work).
    assert h.process_cpu_pct >= 0.9 * 100 * 0.3 / wall_s
    assert h.logical_cores == psutil.cpu_count()
    del ballast


def test_no_nvml_gives_a_reason() -> None:
    with Sampler(nvml=FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)) as sampler:
        sample = sampler.sample_once()
    assert sample.gpus == () and sample.devices == ()
    assert sample.gpu_status == "no GPU meters: NVML not available (libnvidia-ml.so.1 not found)"
    with Sampler(nvml=FakeNvml([])) as sampler:
        assert "found no NVIDIA GPU" in sampler.sample_once().gpu_status
    with Sampler(use_nvml=False) as sampler:
        assert sampler.sample_once().gpu_status == "GPU meters off"


def test_scripted_session_numbers() -> None:
    s = session(6 * GIB, windows=False)
    s.step(2 + 6 + 3)  # idle, load, decode
    samples = s.sampler.history()
    used = [u for x in samples if (u := x.gpus[0].memory_used_bytes) is not None]
    assert len(used) == len(samples)
    assert used[:8] == sorted(used[:8]) and used[0] == OTHERS and used[7] == OTHERS + 6 * GIB  # rising during load
    decoding = samples[-1].gpus[0]
    assert decoding.process_memory_used_bytes == 6 * GIB
    assert (decoding.utilization_memory_pct, decoding.pcie_rx_kb_per_s) == (91, 2_000)
    assert samples[-1].devices[0].peak_bandwidth_gbps == pytest.approx(PEAK_GBPS)
    assert [x.time_s for x in samples] == [1000.0 + 0.5 * i for i in range(11)]
    assert s.nvml.initialized  # held open while sampling
    s.sampler.close()
    assert not s.nvml.initialized and s.nvml.init_calls == 2  # detection's session and the sampler's
    line = format_sample(samples[-1])
    assert "GPU0 VRAM 6.59 GiB / 8.00 GiB (this process 6.00 GiB) util 62% mem-ctrl 91%" in line
    assert "PCIe rx 0.00 tx 0.00 GB/s" in line and "2535/9001 MHz" in line and "67C 155 W" in line
    d = sample_to_dict(samples[-1])
    assert d["gpus"][0]["memory_used_bytes"] == OTHERS + 6 * GIB and d["shared_gpu_memory"] is None
    json.dumps(d)


def test_gpu_lost_mid_session_keeps_the_rest() -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu(name="NVIDIA GeForce RTX 3060", memory_total_bytes=12 * GIB)])
    with Sampler(nvml=nvml) as sampler:
        assert len(sampler.sample_once().gpus) == 2
        nvml.gpus[1] = FakeGpu(errors={"nvmlDeviceGetHandleByIndex": NVML_ERROR_GPU_IS_LOST})
        sample = sampler.sample_once()
    assert [g.index for g in sample.gpus] == [0]
    assert "GPU 1 unreadable (GPU is lost)" in sample.gpu_status


def test_thread_samples_at_its_rate_and_bounds_history() -> None:
    sampler = Sampler(interval_s=0.25, history_s=1.0, nvml=FakeNvml([FakeGpu()]))
    got: list[float] = []
    seen = threading.Event()

    def listener(sample: object) -> None:
        got.append(time.monotonic())
        if len(got) >= 7:
            seen.set()

    unsubscribe = sampler.subscribe(listener)
    sampler.start()
    try:
        assert seen.wait(5)
    finally:
        sampler.stop()
        unsubscribe()
    assert not sampler.running
    gaps = [b - a for a, b in itertools.pairwise(got)]
    assert 0.2 < sum(gaps) / len(gaps) < 0.35  # 4 Hz, not drifting
    assert len(sampler.history()) == 5  # 1 s of history at 4 Hz (+1)
    assert sampler.thread_cpu_s > 0
    with pytest.raises(ValueError, match="sampling interval"):
        Sampler(interval_s=0.05)


def test_monitor_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["monitor", "--json", "--seconds", "0.5", "--interval", "0.25"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = json.loads(lines[0])["monitor"]
    assert header["pid"] == os.getpid() and header["interval_s"] == 0.25
    rows = [json.loads(x) for x in lines[1:]]
    assert len(rows) == 2
    assert rows[0]["host"]["ram_total_bytes"] == psutil.virtual_memory().total
    assert cli_main(["monitor", "--seconds", "0.25", "--interval", "0.25"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("# ") and "RAM process" in text[1] and "threads" in text[1]
    assert cli_main(["monitor", "--interval", "0.01"]) == 2
    assert "sampling interval" in capsys.readouterr().err
