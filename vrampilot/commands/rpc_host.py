"""`vrampilot rpc-host`: share this machine's device with another machine's plans, over llama.cpp's
RPC protocol (the bundled ggml-rpc-server, from the same build as the engine).

The main machine then plans with `--rpc THIS-HOST:PORT=SIZE` (or the Plan panel's RPC hosts) and
runs the model in its llama-server, which sends this host its layers. RPC has no authentication
and no encryption: anyone who can reach the port can use this machine's device and memory, so it
listens on 127.0.0.1 unless an interface is named, and says so when one is.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from vrampilot.errors import UserError

DEFAULT_PORT = 50052
READY_TIMEOUT_S = 30.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "rpc-host",
        help="share this machine's device with another machine's plans (llama.cpp RPC)",
        description="Start the bundled ggml-rpc-server so that another machine running VRAM Pilot (or "
        "llama-server --rpc) can put layers here. No authentication: use it on a network you trust.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default 127.0.0.1: this machine "
        "only; give the LAN address, or 0.0.0.0 for every network)",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads when the CPU is the shared device")
    p.add_argument("--cache", action="store_true", help="keep received weights in a local cache (faster reloads)")
    p.add_argument("--json", action="store_true", help="print one JSON line once ready, then the server's log")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from vrampilot.commands.foreground import run_in_foreground
    from vrampilot.hardware import RpcHostError, query_host
    from vrampilot.server import ServerProcess, tool_env, tool_path
    from vrampilot.server.process import check_port

    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, not {args.port}")
    if args.threads is not None and args.threads < 1:
        raise UserError("--threads must be at least 1")
    check_port(args.host, args.port)
    argv = [str(tool_path("ggml-rpc-server")), "-H", args.host, "-p", str(args.port)]
    if args.threads:
        argv += ["-t", str(args.threads)]
    if args.cache:
        argv.append("-c")
    server = ServerProcess(argv, tool_env(), on_log=(lambda line: print(line, file=sys.stderr)) if args.json else None)
    endpoint = f"{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}"

    def ready(stopping: threading.Event) -> None:
        host = None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while host is None and time.monotonic() < deadline and server.running and not stopping.is_set():
            try:
                host = query_host(endpoint, timeout_s=2)
            except RpcHostError:
                time.sleep(0.2)
        if host is None:
            lines = server.lines()
            raise UserError("ggml-rpc-server did not start: " + (lines[-1] if lines else "no output"))
        _announce(args, host, server.pid)

    return run_in_foreground(server, ready, label="RPC host", binary="ggml-rpc-server")


def _announce(args: argparse.Namespace, host: object, pid: int | None) -> None:
    from vrampilot.hardware import RpcHost
    from vrampilot.server.process import LOOPBACK
    from vrampilot.units import format_bytes

    assert isinstance(host, RpcHost)
    local = args.host in LOOPBACK
    if args.json:
        print(
            json.dumps(
                {
                    "endpoint": f"{args.host}:{args.port}",
                    "pid": pid,
                    "loopback_only": local,
                    "devices": [
                        {
                            "index": d.index,
                            "memory_free_bytes": d.memory_free_bytes,
                            "memory_total_bytes": d.memory_total_bytes,
                        }
                        for d in host.devices
                    ],
                }
            ),
            flush=True,
        )
        return
    sizes = ", ".join(format_bytes(d.memory_total_bytes) for d in host.devices)
    print(f"Sharing {len(host.devices)} device(s) ({sizes}) at {args.host}:{args.port} over llama.cpp RPC")
    if local:
        print("Listening on this machine only: give --host with this machine's LAN address to share it.")
    else:
        print(
            "Warning: RPC has no authentication or encryption. Anyone who can reach this port can use this "
            "machine's device and memory: use it only on a network you trust."
        )
    print(f"On the main machine: vrampilot plan --rpc {args.host}:{args.port}=SIZE (SIZE: what it may use here)")
    print("Ctrl+C stops it.", flush=True)
