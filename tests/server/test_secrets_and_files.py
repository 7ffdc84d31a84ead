"""`vrampilot serve` with a model file that changes under it, on the real bundled llama-server: a
model file cut while it is served ends the server with a line that says why."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.processes import wait_gone
from tests.server.test_serve import _serve_cli, client
from vrampilot.gguf.reader import read_gguf
from vrampilot.server import ServerConfig, free_port

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]


def test_a_model_file_cut_while_served_ends_serve_with_the_reason(tmp_path: Path, embedded_model: Path) -> None:
    model = Path(shutil.copy(embedded_model, tmp_path / "model.gguf"))
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path / "home")}
    proc, info = _serve_cli([str(model), "--port", str(free_port()), "--ctx", "1024", "--threads", "1"], env)
    try:
        os.truncate(model, read_gguf(model).data_offset_bytes)  # a download tool rewriting it in place
        with contextlib.suppress(openai.APIError):  # the server dies answering: no reply
            client(ServerConfig(port=int(info["port"])), key=None).chat.completions.create(
                model=str(info["model_id"]), messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert wait_gone(int(info["pid"]), 15)
    assert code == 128 + signal.SIGBUS, err[-2000:]
    assert "llama-server was killed by SIGBUS (its model file was probably truncated or rewritten" in err
    assert "Traceback" not in err
    # Started again, the file's header says what is wrong before llama-server runs.
    again = subprocess.run([sys.executable, "-m", "vrampilot", "serve", str(model), "--port", str(free_port())],
                           capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)  # fmt: skip
    assert again.returncode == 2 and "points past the end of the file" in again.stderr, again.stderr
