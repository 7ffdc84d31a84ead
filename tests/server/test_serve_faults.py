"""Faults a served model meets on a desktop (issue #44): the server killed mid-stream, the command
killed or stopped by a service manager or a terminal's Ctrl+C, the port taken, two serves at once,
and twenty streaming clients at once. Real `vrampilot serve` commands and llama-server processes on
127.0.0.1; every wait is for an event, bounded."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from testkit.machines import cpu_machine
from tests.server.processes import wait_gone
from tests.server.test_serve import ROOT, _serve_cli, client
from vrampilot.engine import Message, SamplingParams
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.server import ServerConfig, ServerExited, ServerProcess, free_port, tool_env, tool_path
from vrampilot.server.backend import ServerBackend, ServerChatError
from vrampilot.server.process import exit_status, exit_text, is_alive

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
            model="x",
            messages=[{"role": "user", "content": "Write a long story about a mill."}],
            max_tokens=400,
            stream=True,
        )
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


def test_the_apps_chat_never_takes_a_cut_reply_for_a_whole_one(embedded_model: Path) -> None:
    p = plan(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=1024, n_threads=1, n_threads_batch=1),
    )
    config = ServerConfig("127.0.0.1", free_port())
    argv = llama_server_argv(
        p.spec.path, p.settings, host=config.host, port=config.port, server=str(tool_path("llama-server"))
    )
    server = ServerProcess(argv, tool_env())
    server.start()
    try:
        server.wait_ready(config.base_url, timeout_s=120)
        backend = ServerBackend(config.base_url)
        quiet: dict[str, Any] = {"on_report": lambda _x: None, "cancel": threading.Event(), "trim": False}
        backend.reply(None, [Message("user", "Hi")], SamplingParams(max_tokens=2), on_text=lambda _t: None, **quiet)
        pieces: list[str] = []

        def kill_after_three(text: str) -> None:
            pieces.append(text)
            if len(pieces) == 3 and server.pid is not None:
                os.kill(server.pid, signal.SIGKILL)

        # The second reply (the server's context already known, so nothing else asks the dead
        # server): the cut stream is an error, not a short answer saved as complete.
        with pytest.raises(ServerChatError, match="stopped midway"):
            backend.reply(
                None,
                [Message("user", "Write a long story about a mill.")],
                SamplingParams(max_tokens=300),
                on_text=kill_after_three,
                **quiet,
            )
        assert len(pieces) >= 3
    finally:
        server.stop()


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
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "serve", "--json", "--port", str(free_port()), *SERVE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        server_pid = int(info["pid"])
        assert os.getpgid(server_pid) != os.getpgid(proc.pid)  # out of the terminal's group
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0
        assert wait_gone(server_pid)
        assert proc.stderr is not None
        log = proc.stderr.read()
        assert "second interrupt" not in log and log.strip().endswith("vrampilot: server stopped"), log[-500:]
    finally:
        if proc.poll() is None:
            proc.kill()


class _Lines:
    """A command's stderr, read on a thread of its own so that a test can wait for one line."""

    def __init__(self, stream: Any) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, start: str, timeout_s: float = 120) -> str:
        """The next line that starts with `start`; fails when the command ends or says nothing in time."""
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no line {start!r}; heard: {self.seen[-20:]}") from None
            self.seen.append(line)
            if line.startswith(start):
                return line


def test_a_llama_server_that_stops_answering_is_said_and_serve_still_stops(env: dict[str, str]) -> None:
    proc, info = _serve_cli(["--port", str(free_port()), *SERVE], env)
    server_pid = int(info["pid"])
    assert proc.stderr is not None
    said = _Lines(proc.stderr)
    try:
        # Alive and silent (a debugger, a driver that hangs): clients would wait with nothing coming.
        os.kill(server_pid, signal.SIGSTOP)
        hung = said.wait_for("vrampilot: llama-server does not answer")
        assert f"its process {server_pid} is stopped" in hung, hung
        os.kill(server_pid, signal.SIGCONT)
        said.wait_for("vrampilot: llama-server answers again")
        os.kill(server_pid, signal.SIGSTOP)
        said.wait_for("vrampilot: llama-server does not answer")
        # The stop still stops: the server is continued to take it, and shuts down as asked.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert wait_gone(server_pid), "llama-server outlived the command"
        assert said.wait_for("vrampilot: ") == "vrampilot: server stopped", said.seen[-5:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server_pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()


def _stubborn(grace_s: float) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("stubborn_child.py")), str(grace_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ready "), proc.stderr.read() if proc.stderr else ""
    return proc, int(line.split()[1])


def _stopped_by_kill(proc: subprocess.Popen[str], server_pid: int) -> None:
    assert proc.wait(60) == 0
    assert wait_gone(server_pid)
    assert proc.stderr is not None
    assert proc.stderr.read().splitlines() == [
        "vrampilot: stubborn-server did not stop when asked and was killed",
        "vrampilot: server stopped",
    ]


def test_a_server_no_stop_signal_reaches_is_killed_after_its_grace() -> None:
    proc, server_pid = _stubborn(grace_s=1)
    try:
        proc.send_signal(signal.SIGTERM)
        _stopped_by_kill(proc, server_pid)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_second_stop_signal_kills_the_server_at_once() -> None:
    proc, server_pid = _stubborn(grace_s=3600)  # the first signal alone would wait an hour
    try:
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        _stopped_by_kill(proc, server_pid)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_port_held_by_another_program_is_named_with_how_to_choose_another(env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "vrampilot", "serve", "--port", str(port), *SERVE],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env=env,
        )
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and f"port {port} on 127.0.0.1 is in use by another program" in line[0], r.stderr
    assert "is free (--port " in line[0]


def test_a_port_taken_after_the_check_is_the_same_one_line() -> None:
    # What llama-server writes when another program bound the port between our check and its bind.
    lines = [
        "0.00.040.635 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
        "0.00.040.649 I srv    operator(): operator(): cleaning up before exit...",
        "0.00.040.737 E srv  llama_server: exiting due to HTTP server error",
    ]
    assert ServerExited(1, lines).port_taken
    said = "llama-server exited with status 1: port 8080 on 127.0.0.1 is in use by another program"
    assert exit_text(1, lines) == said
    assert (exit_status(-9), exit_status(0), exit_status(3)) == (137, 1, 3)


def test_a_server_that_cannot_bind_is_not_taken_for_the_one_that_answers(embedded_model: Path) -> None:
    # Another llama-server serves the port (a second serve won the race): its /health answers 200
    # while ours fails to bind. Ready means ours answers, never that something on the port does.
    p = plan(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=512, n_threads=1, n_threads_batch=1),
    )
    port = free_port()
    argv = llama_server_argv(
        p.spec.path, p.settings, host="127.0.0.1", port=port, server=str(tool_path("llama-server"))
    )
    first, second = ServerProcess(argv, tool_env()), ServerProcess(argv, tool_env())
    first.start()
    try:
        first.wait_ready(f"http://127.0.0.1:{port}", timeout_s=120)
        second.start()
        with pytest.raises(ServerExited) as err:
            second.wait_ready(f"http://127.0.0.1:{port}", timeout_s=120)
        assert err.value.port_taken and first.running
    finally:
        second.stop()
        first.stop()


def test_two_serves_at_once_on_one_port_and_on_two(env: dict[str, str]) -> None:
    def serve(port: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "vrampilot", "serve", "--json", "--port", str(port), *SERVE],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )

    port = free_port()
    both = [serve(port), serve(port)]
    try:
        # Whichever wins, the other says so in one line; never two servers, never a server
        # announced that is not its own.
        announced = [p.stdout.readline() if p.stdout else "" for p in both]
        winners = [p for p, line in zip(both, announced, strict=True) if line]
        losers = [p for p, line in zip(both, announced, strict=True) if not line]
        assert len(winners) == 1 and len(losers) == 1, announced
        assert losers[0].wait(60) == 2
        line = _last_line(losers[0])
        assert line.startswith(f"vrampilot: port {port} on 127.0.0.1 is in use by another program; port "), line
        assert client(ServerConfig(port=port), key=None).models.list().data
        others = [serve(free_port()), serve(free_port())]
        try:
            infos = [json.loads(p.stdout.readline() if p.stdout else "") for p in others]
            for info in infos:  # two ports: both serve, each its own process
                assert client(ServerConfig(port=int(info["port"])), key=None).models.list().data
            assert len({info["pid"] for info in infos}) == 2
        finally:
            for p in others:
                p.send_signal(signal.SIGINT)
                p.wait(60)
    finally:
        for p in both:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(60)


@pytest.mark.timeout(900)  # forty queued streams on a busy 2-core machine; each ends by itself
def test_twenty_streaming_clients_are_all_answered_in_bounded_memory(env: dict[str, str]) -> None:
    clients, rounds = 20, 2
    proc, info = _serve_cli(["--port", str(free_port()), "--ctx", "2048", "--threads", "1"], env)
    try:
        server = psutil.Process(int(info["pid"]))
        rss_before = server.memory_info().rss
        answered: list[str] = []
        errors: list[str] = []
        peak = [rss_before]
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.5):
                peak.append(server.memory_info().rss)

        def one_client(i: int) -> None:
            # One slot (-np 1): a stream hears nothing while the others' replies go first, so its
            # read timeout is the whole queue's, not one reply's.
            c = openai.OpenAI(base_url=str(info["openai_base_url"]), api_key="none", max_retries=0, timeout=800)
            for r in range(rounds):
                try:
                    stream = c.chat.completions.create(
                        model="x",
                        messages=[{"role": "user", "content": f"Client {i}, round {r}: name a colour."}],
                        max_tokens=8,
                        stream=True,
                    )
                    answered.append("".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices))
                except openai.APIError as exc:
                    errors.append(repr(exc))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        threads = [threading.Thread(target=one_client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=850)  # each client's requests end by themselves (max_tokens, timeout)
        done.set()
        assert not errors and len(answered) == clients * rounds and all(answered), errors[:3]
        # The KV cache and weights are allocated at load; twenty queued streams add buffers and
        # threads, not a second model.
        assert max(peak) < 2 * rss_before, (rss_before, max(peak))
        assert proc.poll() is None and server.is_running()
        print(
            f"20 clients: {len(answered)} answered, llama-server RSS {rss_before / 2**20:.0f} MiB before, "
            f"{max(peak) / 2**20:.0f} MiB at most, {server.memory_info().rss / 2**20:.0f} MiB after"
        )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
