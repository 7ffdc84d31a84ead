"""Without torch (the optional `hybrid` extra) the app starts, chats with llama.cpp, and says how to
enable the hybrid backend. Run in a real child process whose `import torch` fails: this one has
torch installed, and a module once imported cannot be un-imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.speed_record import save_measured_record
from vrampilot.speed import HostProbe

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("no_torch_child.py")


@pytest.mark.parametrize(
    ("refused", "hint"),
    [
        # pip install without the extra: the package is there, torch is not.
        ("torch", "needs torch, which is not installed: pip install 'vrampilot[hybrid]'"),
        # The installers' bundle: vrampilot.hybrid is left out as well (packaging/vrampilot.spec).
        ("torch,vrampilot.hybrid", "This build leaves out the experimental hybrid backend and torch"),
    ],
    ids=["no-torch", "bundle"],
)
def test_the_window_starts_and_chats_without_torch(
    tmp_path: Path, refused: str, hint: str, host_probe: HostProbe
) -> None:
    save_measured_record(tmp_path / "home", host_probe)  # a returning user: no probe beside the reply
    env = {
        **os.environ,
        "VRAMPILOT_HOME": str(tmp_path / "home"),
        "QT_QPA_PLATFORM": "offscreen",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, str(CHILD), refused], env=env, capture_output=True, text=True, timeout=240, cwd=ROOT
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert "error" not in out, out["error"]
    assert out["window"] and out["exit_code"] == 0
    # Listed, greyed, and saying how to get it.
    assert out["hybrid_listed"] and out["hybrid_label"].startswith("Experimental hybrid: default")
    assert not out["hybrid_enabled"]
    assert hint in out["hybrid_tooltip"] and "pip install 'vrampilot[hybrid]'" in out["hybrid_tooltip"]
    assert hint in out["combo_tooltip"]
    # The chat stored with the hybrid backend reopens on llama.cpp, with a note why.
    assert out["chat_id"] and out["backend_shown"] == "llama.cpp"
    assert hint in out["note"] and "replies with llama.cpp" in out["note"]
    # ... and gets an answer from llama.cpp.
    assert out["replied"] and out["reply"]
    assert out["reply_stats"]["completion_tokens"] > 0 and "backend" not in out["reply_stats"]
    # torch was never loaded (the app only looked for it).
    assert not out["torch_in_sys_modules"]
