"""One app per data folder: a second start raises the first window and exits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from vrampilot.ui.instance import InstanceLock

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_lock_on_the_folder_asks_the_first_to_raise(tmp_path: Path) -> None:
    first, second = InstanceLock(tmp_path), InstanceLock(tmp_path)
    raised = threading.Event()
    assert first.acquire()
    try:
        first.serve(raised.set)
        assert not second.acquire()
        assert second.ask_first_to_raise()
        assert raised.wait(5)
    finally:
        first.release()
    # Released (as when the first app ends, however it ends): the next start is the first again.
    third = InstanceLock(tmp_path)
    assert third.acquire()
    assert not third.ask_first_to_raise()  # nobody listens any more
    third.release()


def test_a_second_app_start_exits_at_once_after_raising_the_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = InstanceLock(home / "data")
    raised = threading.Event()
    assert first.acquire()
    try:
        first.serve(raised.set)
        env = {**os.environ, "VRAMPILOT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
        proc = subprocess.run(
            [sys.executable, "-m", "vrampilot", "gui"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert "already open for this data folder: its window was raised" in proc.stderr
        assert raised.wait(5)
    finally:
        first.release()
