"""Other programs keeping the CPU busy, as on a desktop where something compiles: CPU-bound loops
that stop when the test ends, and by themselves after `limit_s` whatever happens to the test."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_SPIN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
# The loops are not this process's children: speed/cpu_load.py counts a child's CPU time as the
# app's own (a private llama-server), so a launcher starts them and exits, and init adopts them.
_LAUNCH = (
    "import subprocess, sys\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    p = subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[3]], start_new_session=True,\n"
    "                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "    print(p.pid, flush=True)\n"
)


@contextmanager
def busy_loops(count: int = 2, limit_s: float = 600.0) -> Iterator[list[int]]:
    """`count` other programs each keeping one core busy; yields their process ids."""
    out = subprocess.run(
        [sys.executable, "-c", _LAUNCH, str(count), _SPIN, str(limit_s)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    pids = [int(line) for line in out.split()]
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
