"""Real MCP servers (tests/agents/mcp_servers.py, the SDK's own server side) over stdio and over
streamable HTTP on 127.0.0.1, and every way one can go wrong: each reported on its own in one
line, none stopping the others."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import waits
from vrampilot.agents import McpManager, State, parse_config
from vrampilot.server import free_port

SERVERS = str(Path(__file__).with_name("mcp_servers.py"))
# Starting a child Python with the SDK imported takes seconds, more on a loaded machine.
START_S = 120.0


def _stdio(kind: str, **extra: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [SERVERS, kind], **extra}


@pytest.fixture(scope="module")
def manager() -> Iterator[McpManager]:
    cfg = parse_config(
        json.dumps(
            {
                "mcpServers": {
                    "good": _stdio(
                        "good", env={"MINE": "1"}, allowedTools=["add", "echo", "fail", "big", "slow", "crash"]
                    ),
                    "missing": {"command": "vrampilot-no-such-command"},
                    "exits": _stdio("exit"),
                    "off": _stdio("good", disabled=True),
                }
            }
        )
    )
    with McpManager(cfg, start_timeout_s=START_S, backoff_s=(0.2, 0.2, 0.2, 0.2, 0.2, 0.2)) as m:
        waits.until_true(lambda: m.statuses()[0].state is State.READY, cpu_s=120)
        yield m


def test_stdio_server_tools_and_calls(manager: McpManager, monkeypatch: pytest.MonkeyPatch) -> None:
    good = manager.statuses()[0]
    assert {t.name for t in good.tools} == {"add", "echo", "fail", "big", "slow", "crash"}
    assert manager.call("good", "add", {"a": 2, "b": 3}).text == "5"
    # The child gets the SDK's allow-list and its entry's env, never the app's environment.
    monkeypatch.setenv("VRAMPILOT_SECRET_OF_THE_APP", "x")
    env = manager.call("good", "echo", {"text": "hi"}).text.split("|env:")[1].split(",")
    assert "MINE" in env and "PATH" in env and "VRAMPILOT_SECRET_OF_THE_APP" not in env and "VRAMPILOT_HOME" not in env
    assert manager.statuses()[3].state is State.DISABLED


def test_each_bad_server_is_one_line_and_the_others_go_on(manager: McpManager) -> None:
    waits.until_true(lambda: all(s.last_error for s in manager.statuses()[1:3]), cpu_s=60)
    missing, exits = manager.statuses()[1:3]
    assert "'vrampilot-no-such-command' was not found" in str(missing.last_error)
    assert "exited while starting" in str(exits.last_error) and "cannot open the database" in str(exits.last_error)
    for s in (missing, exits):
        assert "\n" not in str(s.last_error) and s.state in (State.FAILED, State.STARTING)
    waits.until_true(lambda: "gave up" in str(manager.statuses()[1].last_error), cpu_s=60)
    assert manager.statuses()[0].state is State.READY
    # An error result, a hang, 5 MB: outcomes the model is told, the server stays up.
    fail = manager.call("good", "fail", {})
    assert fail.is_error and "fail" in fail.text
    slow = manager.call("good", "slow", {}, timeout_s=1.0)
    assert slow.is_error and "did not answer within 1 s" in slow.text
    big = manager.call("good", "big", {})
    assert not big.is_error and len(big.text) == 5 << 20
    # Stop abandons a call at once.
    stop = threading.Event()
    stop.set()
    assert manager.call("good", "slow", {}, cancel=stop).text == "the call was stopped by the user"
    assert manager.statuses()[0].state is State.READY


def test_a_server_that_crashes_mid_call_is_reported_and_restarted(manager: McpManager) -> None:
    crash = manager.call("good", "crash", {})
    assert crash.is_error and "stopped during the call" in crash.text
    waits.until_true(lambda: manager.statuses()[0].state is not State.READY, cpu_s=30)
    waits.until_true(lambda: manager.statuses()[0].state is State.READY, cpu_s=120)
    assert manager.call("good", "add", {"a": 1, "b": 1}).text == "2"


def test_a_server_that_hangs_at_start_times_out(tmp_path: Path) -> None:
    cfg = parse_config(json.dumps({"mcpServers": {"hang": _stdio("hang")}}))
    with McpManager(cfg, start_timeout_s=1.0, backoff_s=()) as m:
        waits.until_true(lambda: m.statuses()[0].last_error, cpu_s=30)
        assert "did not answer within 1 s of starting" in str(m.statuses()[0].last_error)


def test_streamable_http_with_a_header_that_never_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVERS, "http", str(port)], stderr=subprocess.PIPE)
    try:
        waits.until_true(lambda: _listening(port), cpu_s=120)
        url = f"http://127.0.0.1:{port}/mcp"
        cfg = parse_config(
            json.dumps(
                {
                    "mcpServers": {
                        "web": {"url": url, "headers": {"X-Test-Token": "t0k3n"}},
                        "nokey": {"url": url, "headers": {"X-Test-Token": "wrong-t0k3n"}},
                    }
                }
            )
        )
        caplog.set_level(logging.DEBUG)
        with McpManager(cfg, start_timeout_s=START_S, backoff_s=()) as m:
            statuses = m.wait_settled(START_S)
            web, nokey = statuses
            assert web.state is State.READY, web.last_error
            assert m.call("web", "add", {"a": 20, "b": 22}).text == "42"
            assert (
                nokey.state is State.FAILED and "error" in str(nokey.last_error) and "\n" not in str(nokey.last_error)
            )
        assert "t0k3n" not in caplog.text
    finally:
        proc.terminate()
        proc.wait(30)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
