"""Bounds for the suite's waits on child processes, in work done rather than wall-clock time.

The suite must pass on a desktop where something else is compiling: two CPU-bound loops beside it
on two cores leave a test's process tree a fraction of the machine, and a wall-clock limit set on a
quiet machine (`doctor --measure` in 120 s) then fails with nothing wrong. What a hang looks like
does not change with the load: the work never ends however much CPU it gets, or it stops getting
any (a deadlock, a wait on something that never comes). So a wait here ends in failure when the
child and its own children have used more CPU time than the work could need (`cpu_s`, set from
what it uses on a quiet machine with a wide margin), or when they have done no work at all for
`idle_s` (for a wait inside this process, whose window ticks: less than IDLE_SHARE of a core),
however long either takes in wall-clock time.
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

# A child that used less CPU than this over IDLE_S did nothing: blocked, not slowed (a slowed one
# still gets the scheduler's share, a second a second at least among a few runnable programs).
IDLE_CPU_S = 0.05
IDLE_S = 120.0
POLL_S = 0.25
# A process that only ticks is blocked too: the window's meters sample the machine every second
# (0.5% of a core measured on an idle window), which kept a wait for a server that was never
# started looking busy for ever. Below this share of one core over `idle_s`, a wait did no work;
# a slowed wait still gets a scheduler's share, far above it.
IDLE_SHARE = 0.02


class WorkBoundExceeded(AssertionError):
    pass


def tree_cpu_s(proc: psutil.Process) -> float:
    """CPU time of `proc` and all of its descendants (running, or already waited for)."""
    total = 0.0
    with contextlib.suppress(psutil.Error):
        t = proc.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                total += c.user + c.system
    return total


def run(
    argv: Sequence[str], *, cpu_s: float, idle_s: float = IDLE_S, text: bool = True, **popen: Any
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(argv, capture_output=True)` bounded by work: WorkBoundExceeded (the child
    tree killed) when it used over `cpu_s` of CPU, or did no work for `idle_s`."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, **popen)
    ps = psutil.Process(proc.pid)
    used = last_used = 0.0
    last_work = time.monotonic()
    while True:
        try:
            out, err = proc.communicate(timeout=POLL_S)
            return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            pass
        used = max(used, tree_cpu_s(ps))
        now = time.monotonic()
        if used - last_used >= IDLE_CPU_S:
            last_used, last_work = used, now
        why = None
        if used > cpu_s:
            why = f"used {used:.0f} s of CPU, more than the {cpu_s:.0f} s this work can need"
        elif now - last_work > idle_s:
            why = f"did no work for {idle_s:.0f} s (blocked)"
        if why is not None:
            _kill_tree(ps)
            out, err = proc.communicate()
            raise WorkBoundExceeded(f"{' '.join(map(str, argv))}: {why}\n--- stdout\n{out}\n--- stderr\n{err}")


def _kill_tree(ps: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):
        for child in ps.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
        ps.kill()


def until(qtbot: Any, predicate: Callable[[], object], *, cpu_s: float, idle_s: float = IDLE_S) -> None:
    """`qtbot.waitUntil(predicate)` bounded by work: this process (the window, its workers, the
    engine's threads) and its children (a llama-server) using over `cpu_s` of CPU while waiting,
    or doing no work for `idle_s`, fails the wait; wall-clock time alone never does."""
    until_polled(lambda: qtbot.wait(50), predicate, cpu_s=cpu_s, idle_s=idle_s)


def until_true(
    predicate: Callable[[], object], *, cpu_s: float, idle_s: float = IDLE_S, poll_s: float = POLL_S
) -> None:
    """`until` without Qt: polls `predicate` (e.g. a child server's health) every `poll_s` under
    the same bounds. A predicate that finds the wait hopeless (the child died) raises itself."""
    until_polled(lambda: time.sleep(poll_s), predicate, cpu_s=cpu_s, idle_s=idle_s)


def holds(
    pause: Callable[[], object], predicate: Callable[[], object], *, cpu_s: float, idle_s: float = IDLE_S
) -> bool:
    """`until_polled` for a child script that reports rather than raises: False where the bounds ended it."""
    try:
        until_polled(pause, predicate, cpu_s=cpu_s, idle_s=idle_s)
    except WorkBoundExceeded:
        return False
    return True


def until_polled(
    pause: Callable[[], object], predicate: Callable[[], object], *, cpu_s: float, idle_s: float = IDLE_S
) -> None:
    """Calls `pause()` (an event loop's turn, a sleep) until `predicate()`, under the bounds above."""
    me = psutil.Process()
    start = tree_cpu_s(me)
    # (time, work so far) samples spanning the last idle_s: the oldest is at least idle_s old.
    history = collections.deque([(time.monotonic(), start)])
    own = 0.0  # what the waiting itself costs (measuring, polling): not work the wait waits for
    while True:
        polled = time.thread_time()
        if predicate():
            return
        own += time.thread_time() - polled
        pause()
        measured = time.thread_time()
        used, now = tree_cpu_s(me), time.monotonic()
        own += time.thread_time() - measured
        used -= own
        if used - start > cpu_s:
            raise WorkBoundExceeded(
                f"waited while using {used - start:.0f} s of CPU, more than the {cpu_s:.0f} s this work can need"
            )
        history.append((now, used))
        while len(history) > 2 and now - history[1][0] >= idle_s:
            history.popleft()
        since, used_then = history[0]
        if now - since >= idle_s and used - used_then < max(IDLE_CPU_S, IDLE_SHARE * (now - since)):
            raise WorkBoundExceeded(
                f"waited while doing no work for {idle_s:.0f} s (blocked; "
                f"{used - used_then:.2f} s of CPU in {now - since:.0f} s)"
            )
