"""How much of the CPU other programs used during a measurement (psutil).

A speed measured while another program computes says little about this machine: llama.cpp's
threads wait for each other at every graph node, so one preempted thread stalls them all and two
threads can run slower than one. The probe and the per-reply calibration therefore measure what
everything else took meanwhile (all CPU time minus this process's and its children's) and set aside what was taken on
a busy machine.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import psutil

# Other programs' share of all cores above which a speed measurement is set aside: on a machine of
# few cores a quarter of them preempts one of llama.cpp's threads often (docs/speed-model.md,
# "Predicted speed": what a reply is not learned from).
BUSY_SHARE = 0.25


def _busy_seconds() -> float:
    """CPU time spent by anyone, including time a hypervisor gave to other guests ("steal")."""
    t = psutil.cpu_times()
    # guest time is already inside user/nice on Linux; Windows has only user/system/interrupt.
    names = ("user", "nice", "system", "irq", "softirq", "steal", "interrupt", "dpc")
    return sum(float(getattr(t, n, 0.0)) for n in names)


def _own_seconds() -> float:
    """This process's CPU time and its children's: a private llama-server computing a reply is
    ours, not another program's (the ones still running, and those already waited for)."""
    me = psutil.Process()
    t = me.cpu_times()
    own: float = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # it may exit meanwhile: then it is in children_*
            c = child.cpu_times()
            own += c.user + c.system
    return own


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    busy_s: float
    own_s: float


def snapshot() -> CpuSnapshot:
    return CpuSnapshot(time.monotonic(), _busy_seconds(), _own_seconds())


def others_share(since: CpuSnapshot, now: CpuSnapshot | None = None) -> float:
    """Share of all cores (0..1) that other processes used between the two snapshots."""
    now = now or snapshot()
    wall = now.wall_s - since.wall_s
    if wall <= 0:
        return 0.0
    others = (now.busy_s - since.busy_s) - (now.own_s - since.own_s)
    return min(1.0, max(0.0, others / (wall * (psutil.cpu_count() or 1))))
