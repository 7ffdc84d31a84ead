"""Faults a served model meets on a desktop (issue #44): the server killed mid-stream, the command
killed or stopped by a service manager or a terminal's Ctrl+C, the port taken, two serves at once,
and twenty streaming clients at once. Real `vrampilot serve` commands and llama-server processes on
127.0.0.1; every wait is for an event, bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.processes import wait_gone
from tests.server.test_serve import ROOT, _serve_cli, client
from vrampilot.server import ServerConfig, free_port
from vrampilot.server.process import is_alive

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")
psutil = pytest.importorskip("psutil")
SERVE = ["--ctx", "1024", "--threads", "1"]
KILLED = "vrampilot: llama-server was killed by SIGKILL (the system may have run out of memory)"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}


def _last_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    return proc.stderr.read().strip().splitlines()[-1]


def test_a_server_killed_mid_stream_cuts_the_stream_and_serve_says_why_in_one_line(env: dict[str, str]) -> None:
    proc, info = _serve_cli(["--port", str(free_port()), *SERVE], env)
    try:
        stream = client(ServerConfig(port=int(info["port"])), key=None).chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Write a long story about a mill."}], max_tokens=400,
            stream=True,
        )  # fmt: skip
        chunks = 0
        with pytest.raises(openai.APIConnectionError):  # an error, not a quiet end and not a hang
            for _chunk in stream:
                chunks += 1
                if chunks == 3:
                    os.kill(int(info["pid"]), signal.SIGKILL)  # as the OOM killer would
        # The command ends with the server, says why in one line, and a shell reads 128+9.
        assert proc.wait(60) == 128 + signal.SIGKILL
        assert _last_line(proc) == KILLED
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_stops_serve_and_its_server_before_it_exits(env: dict[str, str]) -> None:
    proc, info = _serve_cli(["--port", str(free_port()), *SERVE], env)
    server_pid = int(info["pid"])
    try:
        proc.send_signal(signal.SIGTERM)  # systemctl stop, docker stop, a desktop logging out
        assert proc.wait(60) == 0
        # Stopped, not left to stop later: a restarted service finds its port free.
        assert not is_alive(server_pid), "llama-server outlived the command"
        assert _last_line(proc) == "vrampilot: server stopped"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_terminals_ctrl_c_reaches_the_server_once(env: dict[str, str]) -> None:
    # A terminal sends Ctrl+C to its whole foreground process group; the command passes it on.
    # Twice makes llama-server exit(1) from its signal handler without shutting down.
    proc = subprocess.Popen([sys.executable, "-m", "vrampilot", "serve", "--json", "--port", str(free_port()), *SERVE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                            start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        server_pid = int(info["pid"])
        assert os.getpgid(server_pid) != os.getpgid(proc.pid)  # out of the terminal's group
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
        assert wait_gone(server_pid, 10)
        assert proc.stderr is not None
        log = proc.stderr.read()
        assert "second interrupt" not in log and log.strip().endswith("vrampilot: server stopped"), log[-500:]
    finally:
        if proc.poll() is None:
            proc.kill()
