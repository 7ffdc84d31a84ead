"""The window keeps going when the loaded model's file is cut on disk: the next question gets a
banner that says so instead of a SIGBUS that ends the app, the chat is kept, and trying again
says what is wrong with the file now."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.speed_record import save_measured_record
from vrampilot.speed import HostProbe

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("model_file_changed_child.py")

pytestmark = pytest.mark.slow


def test_a_model_file_cut_while_loaded_gets_a_banner_not_a_crash(
    tmp_path: Path, embedded_model: Path, host_probe: HostProbe
) -> None:
    save_measured_record(tmp_path / "home", host_probe)  # a returning user: no probe beside the replies
    model = Path(shutil.copy(embedded_model, tmp_path / "model.gguf"))
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(model)], env=env, capture_output=True, text=True, timeout=480, cwd=ROOT
    )
    assert proc.returncode != -signal.SIGBUS, "the app died of SIGBUS"
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line is not None, (proc.returncode, proc.stderr[-3000:])
    out = json.loads(line[len("RESULT ") :])
    assert out["planned"] and out["first"] and out["second_idle"], out
    assert "model.gguf changed on disk after it was loaded" in out["banner"], out
    assert out["load_state"] == "unloaded"
    assert out["stored"] == ["user", "assistant", "user"]  # the new question is kept, waiting for a reply
    assert "not within the file bounds" in out.get("retry_banner", "") or "past the end" in out.get(
        "retry_banner", ""
    ), out
    assert out["send_enabled"]
    assert "Traceback" not in proc.stderr
