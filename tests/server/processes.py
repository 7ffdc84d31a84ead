"""What the serve and RPC tests check of a foreground command: Ctrl+C ends it cleanly and takes its
server process with it."""

from __future__ import annotations

import signal
import subprocess
import time

from vrampilot.server.process import is_alive


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not is_alive(pid)


def assert_ctrl_c_stops(proc: subprocess.Popen[str], server_pid: int, timeout_s: float) -> None:
    """Ctrl+C exits the command with 0, and the server it started is gone within ten seconds."""
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout_s) == 0
    assert wait_gone(server_pid, 10), f"server {server_pid} outlived its command"
