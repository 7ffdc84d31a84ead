"""`vrampilot serve` with a secret and with a model file that changes under it, on the real
bundled llama-server: the API key is on no command line, printed line or file the app wrote; a
model file cut while it is served ends the server with a line that says why."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.server.processes import wait_gone
from tests.server.test_serve import _serve_cli, client
from vrampilot.gguf import read_gguf
from vrampilot.server import ServerConfig, free_port

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("given", ["generated", "file"])
def test_the_api_key_is_on_no_command_line_printed_line_or_app_file(tmp_path: Path, given: str) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "VRAMPILOT_HOME": str(home)}
    port = free_port("0.0.0.0")
    key_args = []
    if given == "file":
        key_file = tmp_path / "key"
        key_file.write_text("\nkey-from-a-file-0123456789abcdef\n")
        key_args = ["--api-key-file", str(key_file)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vrampilot",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--ctx",
            "1024",
            "--threads",
            "1",
            *key_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        shown = []
        for line in proc.stdout:  # ends with the process, if it fails to start
            shown.append(line)
            if line.startswith("Ctrl+C"):
                break
        if given == "file":
            key = "key-from-a-file-0123456789abcdef"
            assert f"API key: the one in {key_file}\n" in shown and key not in "".join(shown)
        else:
            key = next(x.split(": ", 1)[1].strip() for x in shown if x.startswith("API key (generated): "))
        command = next(x for x in shown if x.startswith("Command: "))
        assert len(key) >= 24 and key not in command
        servers = psutil.Process(proc.pid).children()
        assert [p.name() for p in servers] == ["llama-server"]
        # Any user can read a command line (ps, /proc/<pid>/cmdline): the key is in neither.
        for pid in (proc.pid, servers[0].pid):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert key.encode() not in cmdline, cmdline
        # And still required.
        with pytest.raises(openai.AuthenticationError):
            client(ServerConfig(port=port), key="guess").models.list()
        assert client(ServerConfig(port=port), key=key).models.list().data
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    assert key not in proc.stderr.read()
    for f in home.rglob("*"):  # the log, settings, measurements: none holds the key
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f


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
    assert wait_gone(int(info["pid"]))
    assert code == 128 + signal.SIGBUS, err[-2000:]
    assert "llama-server was killed by SIGBUS (its model file was probably truncated or rewritten" in err
    assert "Traceback" not in err
    # Started again, the file's header says what is wrong before llama-server runs.
    again = subprocess.run(
        [sys.executable, "-m", "vrampilot", "serve", str(model), "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert again.returncode == 2 and "points past the end of the file" in again.stderr, again.stderr


@pytest.mark.parametrize("key", [" ", "\t", "", "ends-with-a-blank "], ids=["blank", "tab", "empty", "trailing"])
def test_a_key_no_client_could_send_is_refused_before_anything_starts(tmp_path: Path, key: str) -> None:
    # HTTP drops the blanks at a header's ends: llama-server would want " " and hear "".
    lan = ["--host", "0.0.0.0", "--port", str(free_port("0.0.0.0")), "--ctx", "1024", "--threads", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "serve", "--json", *lan, "--api-key", key],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "VRAMPILOT_HOME": str(tmp_path)},
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    ready = proc.stdout.readline()  # once serving, or "" when it ends without
    if ready:
        proc.send_signal(signal.SIGINT)
    proc.wait(60)
    assert not ready, f"serve started with a key no client can send: {ready}"
    err = proc.stderr.read()
    assert proc.returncode == 2 and err.count("vrampilot: ") == 1, err
    assert err.startswith("vrampilot: --api-key ") and "no client could send it" in err, err
