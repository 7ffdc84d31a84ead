"""`is_alive`: a process id that still names a running process, not a zombie or another's thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import waits
from vrampilot.server.process import is_alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's process and thread ids")


def test_a_running_process_is_alive_and_a_reaped_one_is_not() -> None:
    assert is_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not is_alive(child.pid)


def test_a_zombie_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    status = Path(f"/proc/{child.pid}/status")
    waits.until_true(lambda: "State:\tZ" in status.read_text(), cpu_s=30)  # exited, not yet reaped
    assert not is_alive(child.pid)
    child.wait()


def test_an_id_that_names_another_process_thread_is_not_a_live_process() -> None:
    """Threads take their ids from the processes' range: a dead server's id can be a thread's."""
    ids: list[int] = []
    release = threading.Event()

    def run() -> None:
        ids.append(threading.get_native_id())
        release.wait()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        waits.until_true(lambda: bool(ids), cpu_s=30)
        assert ids[0] != os.getpid()
        os.kill(ids[0], 0)  # the id reaches the thread, as it did the dead server's
        assert not is_alive(ids[0])
    finally:
        release.set()
        thread.join()
