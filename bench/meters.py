"""Sampler overhead: CPU time of the meters' sampling thread per second of wall time.

The issue's budget is under 1% of one core at 2-4 Hz. Measured here at 4 Hz (the most the GUI
uses) over ~10 s, with each thread's own CPU clock (time.thread_time), so the rest of the process
does not count. Baseline in the same run and the same wall time: an idle thread that wakes at the
same 4 Hz and does nothing, which is what the sampler costs apart from its readings (the wake-ups).

Two runs: this machine as it is (real NVML when there is an NVIDIA driver, else psutil only), and
with a scripted GPU (the tests' NVML double: the same Python path as a real GPU, minus the driver's
own microseconds), so the GPU path is measured even on a machine without one.

Run: .venv/bin/python bench/meters.py [--seconds 10] [--hz 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.fake_nvml import GIB, FakeGpu, FakeNvml, FakeProcess, FakeReading
from vrampilot.meters.sampler import Sampler


class IdleTicker:
    """The baseline: a thread with the sampler's wake-up pattern and no work."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-idle", daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.cpu_s = time.thread_time()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measure(sampler: Sampler, seconds: float) -> tuple[float, float, int, float]:
    """(sampler CPU s, idle-thread CPU s, samples, wall s), the two threads run side by side."""
    idle = IdleTicker(sampler.interval_s)
    sampler.open()  # NVML detection is a one-off at start, not part of the steady cost
    t0 = time.monotonic()
    sampler.start()
    idle.start()
    time.sleep(seconds)
    sampler.stop()
    idle.stop()
    wall = time.monotonic() - t0
    n = len(sampler.history())
    sampler.close()
    return sampler.thread_cpu_s, idle.cpu_s, n, wall


def scripted_gpu() -> FakeNvml:
    decoding = FakeReading(
        memory_used_bytes=7 * GIB,
        utilization_gpu_pct=60,
        utilization_memory_pct=90,
        pcie_rx_kb_per_s=2_000,
        clock_graphics_mhz=2500,
        clock_memory_mhz=10501,
        temperature_c=65,
        power_mw=300_000,
        processes=(FakeProcess(os.getpid(), 6 * GIB), FakeProcess(1, 512 * 1024**2)),
    )
    return FakeNvml([FakeGpu(readings=(decoding,))])


def report(label: str, sampler_cpu: float, idle_cpu: float, n: int, wall: float) -> float:
    pct = 100 * sampler_cpu / wall
    per_sample_ms = 1000 * sampler_cpu / max(n, 1)
    ratio = sampler_cpu / idle_cpu if idle_cpu > 0 else float("inf")
    print(
        f"{label:<34} {pct:6.3f}% of a core  ({per_sample_ms:.2f} ms CPU per sample, {n} samples; "
        f"idle thread at the same rate {100 * idle_cpu / wall:.3f}%; ratio {ratio:.1f}x)"
    )
    return pct


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hz", type=float, default=4.0)
    args = parser.parse_args()
    interval = 1.0 / args.hz
    print(f"sampling at {args.hz:g} Hz for {args.seconds:g} s per run; budget: < 1% of one core")
    machine = Sampler(interval_s=interval)
    cpu, idle, n, wall = measure(machine, args.seconds)
    print(f"  this machine's GPU: {machine.gpu_status}")
    worst = report("this machine", cpu, idle, n, wall)
    cpu, idle, n, wall = measure(Sampler(interval_s=interval, nvml=scripted_gpu()), args.seconds)
    worst = max(worst, report("with a scripted GPU (NVML double)", cpu, idle, n, wall))
    verdict = "within" if worst < 1.0 else "OVER"
    print(f"worst {worst:.3f}% of one core: {verdict} the 1% budget")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
