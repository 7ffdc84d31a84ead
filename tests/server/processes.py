"""What the serve and RPC tests check of a foreground command: Ctrl+C ends it cleanly and takes its
server process with it. The waits are bounded by work done (tests/waits.py), not by the clock."""

from __future__ import annotations

import signal
import subprocess

from tests import waits
from vrampilot.server.process import is_alive


def wait_gone(pid: int, cpu_s: float = 30) -> bool:
    """True once `pid` has ended (a WorkBoundExceeded names the wait otherwise)."""
    waits.until_true(lambda: not is_alive(pid), cpu_s=cpu_s, poll_s=0.1)
    return True


def assert_ctrl_c_stops(proc: subprocess.Popen[str], server_pid: int, cpu_s: float) -> None:
    """Ctrl+C exits the command with 0, and the server it started is gone after it."""
    proc.send_signal(signal.SIGINT)
    waits.until_true(lambda: proc.poll() is not None, cpu_s=cpu_s, poll_s=0.1)
    assert proc.returncode == 0
    assert wait_gone(server_pid), f"server {server_pid} outlived its command"
