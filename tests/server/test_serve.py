"""`vrampilot serve` and the bundled llama-server, with clients nobody here wrote: the `openai`
package and curl, against a real server on 127.0.0.1 running the embedded model."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.machines import cpu_machine
from tests.server.processes import assert_ctrl_c_stops, wait_gone
from vrampilot.engine import ContextOverflow, Message, SamplingParams
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.server import PortInUseError, ServerConfig, ServerExited, ServerProcess, free_port, tool_env, tool_path
from vrampilot.server.backend import ServerBackend
from vrampilot.server.process import health, is_alive

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]
KEY = "test-key-1234"
Served = tuple[ServerConfig, ServerProcess]


@pytest.fixture(scope="module")
def served(embedded_model: Path) -> Iterator[Served]:
    p = plan(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=2048, n_threads=1, n_threads_batch=1),
    )
    config = ServerConfig("127.0.0.1", free_port(), KEY)
    argv = llama_server_argv(
        p.spec.path,
        p.settings,
        host=config.host,
        port=config.port,
        server=str(tool_path("llama-server")),
        alias="smollm2",
        metrics=True,
    )
    server = ServerProcess(argv, tool_env(api_key=KEY))
    server.start()
    try:
        server.wait_ready(config.base_url, timeout_s=120, api_key=KEY)
        yield config, server
    finally:
        server.stop()


def client(config: ServerConfig, key: str | None = KEY) -> Any:
    return openai.OpenAI(base_url=config.base_url + "/v1", api_key=key or "none", max_retries=0, timeout=120)


def test_models_list_names_the_served_model(served: Served) -> None:
    config, _ = served
    assert [m.id for m in client(config).models.list().data] == ["smollm2"]


def test_chat_completion_with_max_tokens(served: Served) -> None:
    config, _ = served
    r = client(config).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8,
        temperature=0,
        seed=1,
    )
    assert r.choices[0].message.content and r.usage is not None and r.usage.completion_tokens <= 8
    assert r.choices[0].finish_reason in ("stop", "length")


def test_streaming_and_stop_sequences(served: Served) -> None:
    config, _ = served
    pieces = []
    stream = client(config).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Count from one to ten in words, comma separated."}],
        max_tokens=40,
        temperature=0,
        seed=1,
        stream=True,
        stop=["five"],
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    text = "".join(pieces)
    assert len(pieces) > 1 and "five" not in text.lower() and "six" not in text.lower()


def test_a_long_prompt(served: Served) -> None:
    config, _ = served
    long = "The river runs past the mill and under the old stone bridge. " * 100  # ~1.3K tokens
    r = client(config).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": long + "\nWhat runs past the mill?"}],
        max_tokens=6,
        temperature=0,
    )
    assert r.usage is not None and r.usage.prompt_tokens > 1000 and r.choices[0].message.content


def test_malformed_json_and_a_prompt_longer_than_the_context_get_http_errors(served: Served) -> None:
    config, _ = served
    for raw in (b'{"messages": [', b"not json", b"", b"\xff\xfe", b'{"messages": "x"}', b"[1, 2]"):
        conn = http.client.HTTPConnection("127.0.0.1", config.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", raw, {"Authorization": f"Bearer {KEY}"})
        resp = conn.getresponse()
        error = json.loads(resp.read())["error"]
        conn.close()
        # llama-server calls unparsable JSON a 500 (its parser's exception), a wrong shape a 400.
        assert resp.status in (400, 500) and error["message"], (raw, resp.status, error)
    long = "The river runs past the mill and under the old stone bridge. " * 250  # ~3.3K tokens > 2048
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError, match="exceeds the available context size"):
            client(config).chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": long}], max_tokens=4, stream=stream
            )
    assert health(config.base_url) == 200  # and it goes on serving
    r = client(config).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert r.choices[0].message.content is not None


def test_the_api_key_is_enforced(served: Served) -> None:
    config, _ = served
    with pytest.raises(openai.AuthenticationError):
        client(config, key="wrong").models.list()


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_health_and_completions(served: Served) -> None:
    config, _ = served
    h = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", config.base_url + "/health"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert h.stdout == "200"
    body = json.dumps({"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0})
    r = subprocess.run(
        [
            "curl",
            "-s",
            config.base_url + "/v1/completions",
            "-H",
            f"Authorization: Bearer {KEY}",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(r.stdout)["choices"][0]["text"]
    denied = subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            config.base_url + "/v1/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert denied.stdout == "401"


def test_the_apps_chat_backend_streams_stops_and_reuses_the_cache(served: Served) -> None:
    config, _ = served
    backend = ServerBackend(config.base_url, api_key=KEY)
    seen: list[str] = []
    conv = [Message("user", "Name three colours.")]
    r1 = backend.reply(
        None,
        conv,
        SamplingParams(temperature=0.0, max_tokens=12, seed=1),
        on_text=seen.append,
        on_report=lambda _x: None,
        cancel=threading.Event(),
        trim=False,
    )
    assert r1.text and "".join(seen) == r1.text and r1.stats.completion_tokens > 0 and r1.stats.decode_tps > 0
    assert r1.stats.n_ctx == 2048 and 0 < r1.stats.context_used < 2048
    follow = [*conv, Message("assistant", r1.text), Message("user", "And one more?")]
    r2 = backend.reply(
        None,
        follow,
        SamplingParams(temperature=0.0, max_tokens=6, seed=1),
        on_text=lambda _t: None,
        on_report=lambda _x: None,
        cancel=threading.Event(),
        trim=False,
    )
    assert r2.stats.reused_tokens > 0  # the server's prompt cache kept the first turn
    cancel = threading.Event()

    def stop_soon(text: str) -> None:
        cancel.set()

    r3 = backend.reply(
        None,
        conv,
        SamplingParams(temperature=0.7, max_tokens=200, seed=2),
        on_text=stop_soon,
        on_report=lambda _x: None,
        cancel=cancel,
        trim=False,
    )
    assert r3.stats.stop_reason == "cancelled" and len(r3.text) < 200


def test_a_port_in_use_is_refused_with_a_free_one_suggested(served: Served, embedded_model: Path) -> None:
    config, _ = served
    r = subprocess.run(
        [sys.executable, "-m", "vrampilot", "serve", "--port", str(config.port), "--ctx", "1024"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert f"port {config.port} on 127.0.0.1 is in use" in line and "is free (--port " in line
    assert PortInUseError("127.0.0.1", 1, 2).suggestion == 2


def test_llama_servers_own_refusal_reaches_the_user_verbatim(embedded_model: Path) -> None:
    # A quantized V cache without flash attention: llama.cpp refuses it after reading the model.
    argv = [
        str(tool_path("llama-server")),
        "-m",
        str(embedded_model),
        "-c",
        "512",
        "-ctv",
        "q4_0",
        "-fa",
        "off",
        "--port",
        str(free_port()),
        "-t",
        "1",
    ]
    server = ServerProcess(argv, tool_env())
    server.start()
    with pytest.raises(ServerExited) as err:
        server.wait_ready(f"http://127.0.0.1:{argv[-3]}", timeout_s=120)
    assert "V cache quantization requires flash_attn" in str(err.value) or "flash_attn" in str(err.value)
    server.stop()


def _serve_cli(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "serve", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return proc, json.loads(line)


def test_serve_cli_announces_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    proc, info = _serve_cli(["--port", str(free_port()), "--ctx", "1024", "--threads", "1"], env)
    try:
        assert info["api_key"] is None and str(info["base_url"]).startswith("http://127.0.0.1:")
        assert health(str(info["base_url"])) == 200
        r = client(ServerConfig(port=int(info["port"])), key=None).chat.completions.create(
            model=str(info["model_id"]), messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert r.choices[0].message.content is not None
        assert_ctrl_c_stops(proc, int(info["pid"]), 60)
    finally:
        if proc.poll() is None:
            proc.kill()


def _status(port: int, method: str, path: str, body: dict[str, Any] | None, key: str | None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_listening_on_the_network_requires_a_key_and_makes_one(tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    proc, info = _serve_cli(
        ["--host", "0.0.0.0", "--port", str(free_port("0.0.0.0")), "--ctx", "1024", "--threads", "1"], env
    )
    try:
        assert info["api_key_generated"] and len(str(info["api_key"])) >= 24
        with pytest.raises(openai.AuthenticationError):
            client(ServerConfig(port=int(info["port"])), key="guess").models.list()
        assert client(ServerConfig(port=int(info["port"])), key=str(info["api_key"])).models.list().data
        # Every API route, without a key and with a wrong one, is refused; only /health is open.
        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        port, key = int(info["port"]), str(info["api_key"])
        for method, path, body in [
            ("GET", "/v1/models", None),
            ("GET", "/props", None),
            ("GET", "/slots", None),
            ("GET", "/metrics", None),
            ("POST", "/v1/chat/completions", chat),
            ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
            ("POST", "/tokenize", {"content": "Hi"}),
        ]:
            assert _status(port, method, path, body, None) == 401, path
            assert _status(port, method, path, body, key[:-1]) == 401, path
            assert _status(port, method, path, body, key) == 200, path
        assert _status(port, "GET", "/health", None, None) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def test_a_killed_serve_leaves_no_llama_server_behind(tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    proc, info = _serve_cli(["--port", str(free_port()), "--ctx", "1024", "--threads", "1"], env)
    server_pid = int(info["pid"])
    assert is_alive(server_pid)
    proc.kill()  # kill -9: no handler runs; the kernel's parent-death signal (SIGKILL) ends the server
    proc.wait(30)
    assert wait_gone(server_pid)


def test_stop_during_a_long_prompt_does_not_wait_for_the_first_token(served: Served) -> None:
    config, _ = served
    backend = ServerBackend(config.base_url, api_key=KEY)
    cancel = threading.Event()
    long = [Message("user", "A field of grass under a wide sky, " * 180 + "describe it.")]  # ~1.6K tokens
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    t0 = time.monotonic()
    r = backend.reply(
        None,
        long,
        SamplingParams(max_tokens=50),
        on_text=lambda _t: None,
        on_report=lambda _x: None,
        cancel=cancel,
        trim=False,
    )
    assert r.stats.stop_reason == "cancelled" and time.monotonic() - t0 < 5
    assert health(config.base_url) == 200  # and the server goes on serving
    assert client(config).models.list().data


def test_the_exported_line_names_the_bundled_server_and_runs(embedded_model: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "vrampilot", "export", str(embedded_model), "--cpu-only", "--shell", "bash"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert str(tool_path("llama-server")) in line and "GGML_BACKEND_PATH=" in line
    # The very line, with --version: the binary starts, with the variant this machine runs.
    ran = subprocess.run(["bash", "-c", line + " --version"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "version:" in ran.stderr + ran.stdout


def test_the_served_backend_says_what_dropping_turns_would_keep_and_counts_the_dropped(served: Served) -> None:
    """The served chat sizes "Drop oldest turns" as the in-app one does (issue 58, item 5)."""
    config, _ = served
    backend = ServerBackend(config.base_url, api_key=KEY)
    old = [Message("user", "Tell me about boats. " * 400), Message("assistant", "Boats float.")]
    conv = [*old, Message("user", "And trains?")]
    sampling = SamplingParams(temperature=0.0, max_tokens=8, seed=1)
    with pytest.raises(ContextOverflow) as caught:
        backend.reply(
            None,
            conv,
            sampling,
            on_text=lambda _t: None,
            on_report=lambda _x: None,
            cancel=threading.Event(),
            trim=False,
        )
    drop = caught.value.drop
    assert drop is not None and (drop.dropped, drop.kept, drop.fits) == (2, 0, True) and drop.leaves_nothing
    r = backend.reply(
        None, conv, sampling, on_text=lambda _t: None, on_report=lambda _x: None, cancel=threading.Event(), trim=True
    )
    assert r.stats.dropped_messages == 2 and r.text
