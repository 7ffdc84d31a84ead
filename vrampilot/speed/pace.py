"""How fast this machine runs right now: a gauge read at the probe and after every reply.

A reply is learned from (planner/calibration.py) as what the speed model misses on this machine;
a reply read while the machine ran slower than usual teaches a slow machine instead. Other
programs' CPU time (speed/cpu_load.py) shows one cause; a VM's neighbours on the same memory
bus and cores show none, and a reply's speed can move a long way within minutes with no other
program running. Two of llama.cpp's own kernels, timed right after each reply, move with it in
part: a q8_0 product shaped like a prompt's ubatch (compute) and a q8_0 mat-vec over more bytes
than the last-level cache (memory); how far, and the threshold chosen from it: docs/speed-model.md,
decision log, "The pace gauge". Their summed time is the machine's pace (`pace_ms`, lower is
faster); a reply read when it was well above its usual value is not learned from.
"""

from __future__ import annotations

import logging

from vrampilot.speed.host_probe import pace_ms_with

_log = logging.getLogger(__name__)


def measure_pace_ms(threads: int) -> float | None:
    """Milliseconds for the gauge's two kernels at `threads` threads, each the best of three runs
    (about 10 ms of kernels, and tens of ms setting up their weights: the mat-vec streams 1.5x the
    last-level cache, so where the OS reports a host's far larger cache, as in some VMs, up to about
    a second of CPU). None when llama.cpp's CPU backend cannot run them."""
    from vrampilot.llamacpp import CpuKernels, GgmlError

    try:
        with CpuKernels() as cpu:
            return pace_ms_with(cpu, threads)
    except (GgmlError, OSError):
        _log.warning("pace gauge: llama.cpp's CPU kernels did not run", exc_info=True)
        return None
