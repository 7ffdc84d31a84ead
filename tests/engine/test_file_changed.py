"""A loaded model's file truncated, replaced or deleted on disk: llama.cpp maps the file, so one cut
in place would end the process with SIGBUS at the next token. The engine checks the file before
each reply: cut or rewritten in place, it unloads the model and says so; replaced or deleted,
the mapped old file is intact and the chat goes on. Each case runs in a child process, so a
SIGBUS fails the test instead of ending the test run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("file_changed_child.py")

pytestmark = pytest.mark.slow


def run_child(model: Path, change: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(model), change], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode != -signal.SIGBUS, f"the child died of SIGBUS: {proc.stderr[-2000:]}"
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line is not None, (proc.returncode, proc.stderr[-3000:])
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


@pytest.fixture
def model_copy(tmp_path: Path, embedded_model: Path) -> Path:
    return Path(shutil.copy(embedded_model, tmp_path / "model.gguf"))


def test_a_model_file_cut_while_loaded_is_unloaded_with_a_clear_error(model_copy: Path) -> None:
    out = run_child(model_copy, "truncate")
    assert out["first"] and "second" not in out
    assert str(out["error"]).startswith("ModelFileChanged: model.gguf changed on disk after it was loaded (now ")
    assert "load it again" in str(out["error"]) and out["loaded_after"] is False


@pytest.mark.parametrize("change", ["replace", "delete"])
def test_a_model_file_replaced_or_deleted_while_loaded_keeps_answering(model_copy: Path, change: str) -> None:
    out = run_child(model_copy, change)
    assert out == {"first": True, "second": True, "loaded_after": True}
