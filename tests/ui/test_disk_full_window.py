"""A full disk, for real (a small tmpfs in a private mount namespace as the app's home): a reply
that cannot be saved stays on screen with Save again, the window stays usable; an app started on
a full disk says so in a dialog and one line, without a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("disk_full_child.py")

pytestmark = pytest.mark.slow


def run_on_tmpfs(tmp_path: Path, size: str, mode: str) -> tuple[dict[str, Any], str]:
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux with unshare(1)")
    home = tmp_path / "home"
    home.mkdir()
    prefix = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]
    script = f'mount -t tmpfs -o size={size} tmpfs "{home}" || exit 77; exec "{sys.executable}" "{CHILD}" "$@"'
    env = {**os.environ, "VRAMPILOT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [*prefix, "sh", "-c", script, "child", mode], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    if proc.returncode == 77 or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("RESULT ") :]), proc.stderr


def test_a_reply_the_full_disk_refuses_stays_and_is_saved_later(tmp_path: Path) -> None:
    out, stderr = run_on_tmpfs(tmp_path, "16m", "reply")
    assert out["planned"] and out["idle"], out
    assert "not saved" in str(out["banner"]) and "disk is full" in str(out["banner"])
    assert out["send_enabled"]
    assert out["reply_on_screen"] == ["user", "assistant"]
    assert out["stored_before"] == ["user"]
    assert out["save_again"] and out["stored_after"] == ["user", "assistant"]
    assert "Traceback" not in stderr


def test_starting_on_a_full_disk_says_so_without_a_traceback(tmp_path: Path) -> None:
    out, stderr = run_on_tmpfs(tmp_path, "1m", "start")
    assert out["exit_code"] == 1
    assert out["dialog"] and "cannot start" in str(out["dialog"][0])
    assert "vrampilot: VRAM Pilot cannot start:" in stderr and "Traceback" not in stderr
