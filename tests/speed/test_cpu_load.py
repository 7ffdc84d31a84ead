"""Other programs' CPU share: what this process's children compute is ours (a private llama-server)."""

from __future__ import annotations

import subprocess
import sys

from vrampilot.speed import cpu_load

# A child that computes for a while and reports the CPU time it used.
_BUSY_CHILD = (
    "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint(time.process_time())"
)


def test_a_child_s_cpu_time_counts_as_this_process_s() -> None:
    before = cpu_load.snapshot()
    child = subprocess.run([sys.executable, "-c", _BUSY_CHILD], capture_output=True, text=True, check=True)
    after = cpu_load.snapshot()
    child_cpu_s = float(child.stdout.strip())
    # Own time grew by at least what the child computed: none of it is left to "other programs".
    assert after.own_s - before.own_s >= child_cpu_s * 0.9
