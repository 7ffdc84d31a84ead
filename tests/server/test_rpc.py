"""Plans across llama.cpp RPC hosts, on loopback: two real ggml-rpc-server processes (the bundled
build) with different pinned budgets plus this machine's CPU. What llama.cpp really allocates on
each device (its own log, from a real llama-server run) is held against the plan; the exported
line serves; a host that goes away is a clear error, never the app's end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from tests import waits
from tests.server.processes import assert_ctrl_c_stops, wait_gone
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import RpcHostError, parse_hosts, query_host
from vrampilot.llamacpp import device_buffers
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.server import ServerExited, ServerProcess, free_port, tool_env, tool_path
from vrampilot.server.process import health, is_alive
from vrampilot.speed import detect_measured_machine
from vrampilot.units import MIB

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PRINT_MIB = 0.005 * MIB + 1  # llama.cpp prints MiB with two decimals


def start_rpc_host(port: int) -> ServerProcess:
    host = ServerProcess([str(tool_path("ggml-rpc-server")), "-H", "127.0.0.1", "-p", str(port), "-t", "1"], tool_env())
    host.start()

    def answers() -> bool:
        try:
            query_host(f"127.0.0.1:{port}", timeout_s=2)
        except RpcHostError:
            assert host.running, host.lines()[-5:]  # it ended: no answer will come
            return False
        return True

    waits.until_true(answers, cpu_s=30, poll_s=0.2)
    return host


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[str]]:
    procs = [start_rpc_host(free_port()) for _ in range(2)]
    try:
        yield [f"127.0.0.1:{p.argv[p.argv.index('-p') + 1]}" for p in procs]
    finally:
        for p in procs:
            p.stop()


def serve_and_read_buffers(argv: list[str]) -> tuple[ServerProcess, dict[str, dict[str, int]]]:
    """Start llama-server (with its load log at info level) and parse its buffer lines per device."""
    port = int(argv[argv.index("--port") + 1])
    server = ServerProcess([*argv, "-lv", "4"], tool_env())
    server.start()
    server.wait_ready(f"http://127.0.0.1:{port}", timeout_s=120)
    return server, device_buffers(server.lines())


def test_a_host_answers_with_its_memory_and_a_wrong_one_is_named(hosts: list[str]) -> None:
    h = query_host(hosts[0])
    assert h.version.startswith("7.") and h.devices and h.devices[0].memory_total_bytes > 0 and h.rtt_ms > 0
    with pytest.raises(RpcHostError, match=r"cannot be reached .* is ggml-rpc-server running there"):
        query_host(f"127.0.0.1:{free_port()}")
    # Something else on the port (here: a plain TCP server that closes at once) is not a host.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        t = threading.Thread(target=lambda: s.accept()[0].close(), daemon=True)
        t.start()
        with pytest.raises(RpcHostError, match=r"(closed|dropped) the connection.*ggml-rpc-server"):
            query_host(f"127.0.0.1:{port}")
    with pytest.raises(RpcHostError, match="not an RPC host"):
        parse_hosts("192.168.1.20")
    assert parse_hosts("10.0.0.2:50052=6GiB, [::1]:50053") == [("10.0.0.2:50052", 6 * 1024**3), ("[::1]:50053", None)]


@pytest.mark.parametrize("model", ["smollm2", "qwen2", "gemma3", "qwen3moe", "qwen3moe-output-host"])
def test_the_plan_per_device_is_what_llama_cpp_allocates(hosts: list[str], model: str, tmp_path: Path) -> None:
    """qwen3moe: a mixture of experts whose first two layers' routed experts stay in this
    machine's RAM (--n-cpu-moe 2) while their attention goes to an RPC host.
    qwen3moe-output-host: its experts all on the hosts (pipelined), the second holding the output
    layer alone (-ts 6,1)."""
    arch = model.removesuffix("-output-host")
    path = embedded_model_path() if model == "smollm2" else write_model(tmp_path / f"{arch}.gguf", arch, n_layer=6)
    assert path is not None
    spec = load_model_spec(path)
    rpc = [query_host(e) for e in hosts]
    mb = (spec.weight_bytes + 64 * MIB) // 2
    output_host = model == "qwen3moe-output-host"
    found = detect_measured_machine()
    target = resolve_target(
        TargetRequest(
            rpc_hosts=tuple(rpc), rpc_budget_bytes={hosts[0]: mb * 2 if output_host else mb // 2, hosts[1]: mb * 2}
        ),
        found.machine,
        found.speed,
    )
    moe = model == "qwen3moe"
    pins = Pins(
        n_ctx=2048,
        n_threads=1,
        n_threads_batch=1,
        n_cpu_moe=2 if moe else None,
        tensor_split=(6.0, 1.0) if output_host else None,
    )
    p = plan(spec, target, pins, exact=True)
    assert p.fits and p.settings.rpc_servers == tuple(hosts), p.reasons
    assert p.compute_source == "llama.cpp"  # per device, from llama.cpp's own allocator (a dry run)
    # llama.cpp pipelines ubatches over the hosts unless a tensor override keeps experts in RAM.
    assert p.memory.pipelined == (not moe)
    if moe:
        assert p.settings.n_cpu_moe == 2 and p.settings.n_gpu_layers == spec.n_layer + 1
        assert sum(p.memory.host_override_bytes) == spec.layer_expert_bytes[0] + spec.layer_expert_bytes[1]
    if output_host:
        assert p.memory.device_layers(1) == () and p.memory.output_device == 1
    argv = llama_server_argv(
        path,
        p.settings,
        host="127.0.0.1",
        port=free_port(),
        server=str(tool_path("llama-server")),
        # Without mmap a host buffer holds exactly its tensors (mapped, it spans their file range).
        load_mode="none" if moe else None,
    )
    server, real = serve_and_read_buffers(argv)
    try:
        for d, g in enumerate(target.gpus):
            c = p.memory.per_device[d]
            name = g.buffer_name
            assert name is not None and name in real["compute"], (name, real)
            assert abs(real["model"][name] - c.weights_bytes) <= PRINT_MIB, (name, real["model"], c)
            assert abs(real["kv"].get(name, 0) - c.kv_bytes) <= PRINT_MIB, (name, real["kv"], c)  # KV exact
            # Each host's buffer is that of the layers it holds, and the plan's is llama.cpp's dry
            # run at the plan's own split. Not pipelined, it is the very number llama-server prints:
            # never below. Pipelined, the dry run's surplus copies are taken off, exact up to the
            # two prints' rounding.
            over = c.compute_bytes - real["compute"][name]
            lowest = -2 * PRINT_MIB if p.memory.pipelined else 0
            assert lowest <= over <= 2 * PRINT_MIB, (name, real["compute"], c)
            assert c.total_bytes <= g.memory_budget_bytes
        host_weights = sum(v for k, v in real["model"].items() if k.startswith("CPU"))
        assert abs(host_weights - p.memory.host.weights_bytes) <= PRINT_MIB
        assert abs(real["compute"]["CPU"] - p.memory.host.compute_bytes) <= 0.05 * real["compute"]["CPU"]
        if model != "smollm2":
            return  # the fixtures have no tokenizer to chat with
        # And it answers, across the two hosts.
        conn_argv = [
            "curl",
            "-s",
            f"http://127.0.0.1:{argv[argv.index('--port') + 1]}/v1/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
        ]
        reply = json.loads(subprocess.run(conn_argv, capture_output=True, text=True, timeout=60).stdout)
        assert reply["choices"][0]["message"]["content"]
    finally:
        server.stop()


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vrampilot", *args], capture_output=True, text=True, timeout=240, cwd=ROOT, env=env
    )


def test_plan_export_and_chat_on_the_command_line(hosts: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    rpc = f"{hosts[0]}=60MiB,{hosts[1]}=200MiB"
    r = _cli("plan", "--rpc", rpc, "--ctx", "2048", "--threads", "1", "--json", env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [d["llama_name"] for d in out["devices"]] == ["RPC0", "RPC1"] and all(d["fits"] for d in out["devices"])
    assert out["devices"][0]["budget_bytes"] == 60 * MIB and out["devices"][0]["budget_pinned"]
    assert "--rpc" in out["llama_server"] and "-ts" in out["llama_server"]
    r = _cli(
        "chat",
        "--rpc",
        rpc,
        "--ctx",
        "2048",
        "--threads",
        "1",
        "--prompt",
        "Say hi.",
        "--max-tokens",
        "6",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    chat = json.loads(r.stdout)
    assert chat["served_by"] == "llama-server" and chat["reply"].strip() and chat["stats"]["completion_tokens"] > 0
    # The reply was compared with the prediction for it (and learned from, unless too short or busy).
    assert chat["speed"] is not None and chat["speed"]["predicted_decode_tps"] > 0
    r = _cli("plan", "--rpc", f"127.0.0.1:{free_port()}", "--json", env=env)
    assert r.returncode == 2 and "cannot be reached" in r.stderr.strip().splitlines()[-1]


def test_a_host_that_goes_away_mid_load_is_a_clear_error_and_we_go_on(tmp_path: Path) -> None:
    path = embedded_model_path()
    assert path is not None
    mine = [start_rpc_host(free_port()) for _ in range(2)]
    endpoints = [f"127.0.0.1:{p.argv[p.argv.index('-p') + 1]}" for p in mine]
    try:
        found = detect_measured_machine()
        request = TargetRequest(rpc_hosts=tuple(query_host(e) for e in endpoints))
        target = resolve_target(request, found.machine, found.speed)
        p = plan(load_model_spec(path), target, Pins(n_ctx=2048, n_threads=1, n_threads_batch=1))
        port = free_port()
        argv = llama_server_argv(path, p.settings, host="127.0.0.1", port=port, server=str(tool_path("llama-server")))
        server = ServerProcess([*argv, "-lv", "4"], tool_env())
        server.start()

        def loading() -> bool:
            assert server.running, server.lines()[-5:]
            return any("load_tensors" in line or "RPC1" in line for line in server.lines())

        waits.until_true(loading, cpu_s=120, poll_s=0.01)
        mine[1].proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]  # the second PC loses power
        try:
            server.wait_ready(f"http://127.0.0.1:{port}", timeout_s=60)
            # Loaded before the host went: the first request needs it, and the server ends then.
            subprocess.run(
                [
                    "curl",
                    "-s",
                    "-m",
                    "30",
                    f"http://127.0.0.1:{port}/v1/completions",
                    "-d",
                    '{"prompt": "Hi", "max_tokens": 4}',
                ],
                capture_output=True,
                timeout=60,
            )
            waits.until_true(lambda: not server.running, cpu_s=60, poll_s=0.1)
            why = str(ServerExited(server.returncode, server.lines()))
        except ServerExited as exc:
            why = str(exc)
        # llama.cpp's own words reach the user ("Remote RPC server crashed", "Failed to connect").
        assert "RPC" in why or "connect" in why.lower(), why
        assert not server.running and health(f"http://127.0.0.1:{port}") is None
        assert is_alive(os.getpid())  # this process (the app's) is untouched
    finally:
        for h in mine:
            h.stop()


def test_rpc_host_command_shares_and_stops(tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "rpc-host", "--port", str(port), "--threads", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["loopback_only"] and info["devices"][0]["memory_total_bytes"] > 0
        assert query_host(f"127.0.0.1:{port}").devices
        assert_ctrl_c_stops(proc, int(info["pid"]), 30)
    finally:
        if proc.poll() is None:
            proc.kill()


def _rpc_host_cli(port: int, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "rpc-host", "--port", str(port), "--threads", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    return proc, int(json.loads(proc.stdout.readline())["pid"])


def test_an_rpc_host_killed_says_so_in_one_line_and_a_killed_command_leaves_none(tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    proc, pid = _rpc_host_cli(free_port(), env)
    try:
        os.kill(pid, signal.SIGKILL)  # the shared device's process dies (out of memory, a crash)
        assert proc.wait(30) == 128 + signal.SIGKILL
        assert proc.stderr is not None
        last = proc.stderr.read().strip().splitlines()[-1]
        assert last == "vrampilot: ggml-rpc-server was killed by SIGKILL (the system may have run out of memory)"
    finally:
        if proc.poll() is None:
            proc.kill()
    proc, pid = _rpc_host_cli(free_port(), env)
    proc.kill()  # kill -9 of the command: the kernel ends its ggml-rpc-server
    proc.wait(30)
    assert wait_gone(pid), f"ggml-rpc-server {pid} outlived its command"


def test_a_host_killed_mid_reply_ends_chat_with_llama_cpps_reason_in_one_line(tmp_path: Path) -> None:
    psutil = pytest.importorskip("psutil")
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    mine = [start_rpc_host(free_port()) for _ in range(2)]
    endpoints = [f"127.0.0.1:{p.argv[p.argv.index('-p') + 1]}" for p in mine]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vrampilot",
            "chat",
            "--rpc",
            f"{endpoints[0]}=60MiB,{endpoints[1]}=200MiB",
            "--ctx",
            "1024",
            "--threads",
            "1",
            "--max-tokens",
            "300",
            "--prompt",
            "Write a long story about a mill by a river.",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stdout.read(1)  # the reply has begun
        servers = [c.pid for c in psutil.Process(proc.pid).children() if "llama-server" in c.name()]
        assert len(servers) == 1
        mine[1].proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]  # the second PC loses power
        assert proc.wait(120) == 2
        assert proc.stderr is not None
        last = proc.stderr.read().strip().splitlines()[-1]
        assert last.startswith("vrampilot: the plan across the RPC hosts stopped: llama-server "), last
        assert "RPC" in last.split("stopped:", 1)[1], last  # llama.cpp's words, not "does not answer"
        assert wait_gone(servers[0])
    finally:
        if proc.poll() is None:
            proc.kill()
        for h in mine:
            h.stop()


def test_a_host_killed_mid_stream_ends_serve_with_llama_cpps_reason_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    mine = [start_rpc_host(free_port()) for _ in range(2)]
    endpoints = [f"127.0.0.1:{p.argv[p.argv.index('-p') + 1]}" for p in mine]
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vrampilot",
            "serve",
            "--json",
            "--port",
            str(port),
            "--rpc",
            f"{endpoints[0]}=60MiB,{endpoints[1]}=200MiB",
            "--ctx",
            "1024",
            "--threads",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        server_pid = int(json.loads(proc.stdout.readline())["pid"])
        body = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 300, "stream": True}
        stream = subprocess.Popen(
            [
                "curl",
                "-sN",
                "-m",
                "60",
                f"http://127.0.0.1:{port}/v1/chat/completions",
                "-H",
                "Content-Type: application/json",
                "-d",
                json.dumps(body),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert stream.stdout is not None and stream.stdout.readline().startswith("data: ")  # streaming
        mine[1].proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]  # a started host has its process
        stream.wait(60)  # the client's stream ends (curl -m bounds it either way)
        assert proc.wait(60) == 128 + signal.SIGABRT  # llama.cpp aborts on a lost host
        assert proc.stderr is not None
        last = proc.stderr.read().strip().splitlines()[-1]
        assert last.startswith("vrampilot: llama-server exited with status -6: ") and "RPC" in last, last
        assert wait_gone(server_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
        for h in mine:
            h.stop()
