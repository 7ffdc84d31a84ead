"""The suite's work-bounded waits (tests/waits.py) end a hung child either way it can hang, and
return a child's output as subprocess.run does."""

from __future__ import annotations

import sys
import time

import pytest

from tests import waits


def test_a_child_that_ends_gives_its_output_and_status() -> None:
    r = waits.run(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], cpu_s=60
    )
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")


def test_a_blocked_child_is_ended_after_doing_no_work_for_idle_s() -> None:
    with pytest.raises(waits.WorkBoundExceeded, match="did no work for 2 s"):
        waits.run(
            [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"], cpu_s=60, idle_s=2
        )


def test_a_child_that_works_forever_is_ended_at_its_cpu_bound() -> None:
    # Its grandchild spins: the bound counts the whole tree.
    spin = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
    with pytest.raises(waits.WorkBoundExceeded, match="more than the 1 s"):
        waits.run([sys.executable, "-c", spin], cpu_s=1, idle_s=600)


def test_a_wait_on_something_that_never_comes_ends_as_blocked_however_fast_it_polls() -> None:
    # Polling costs this process CPU; counted as work, a wait on another process's end (a server
    # that outlives its command) would never look blocked.
    with pytest.raises(waits.WorkBoundExceeded, match="doing no work for 2 s"):
        waits.until_true(lambda: False, cpu_s=5, idle_s=2, poll_s=0.0005)


def test_a_wait_beside_a_ticking_thread_ends_as_blocked() -> None:
    """The window's meters tick while a wait waits for a server nobody started: a thread here that
    does a little work every 50 ms (1.2% of a core) is not progress."""
    import threading

    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.05):
            end = time.thread_time() + 0.0006
            while time.thread_time() < end:
                pass

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        with pytest.raises(waits.WorkBoundExceeded, match="doing no work for 5 s"):
            waits.until_true(lambda: False, cpu_s=30, idle_s=5)
    finally:
        stop.set()
        ticker.join()
