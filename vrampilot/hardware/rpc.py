"""llama.cpp RPC hosts (`ggml-rpc-server` on another machine): ask one what it has, in Python.

ggml's own RPC client aborts the whole process when a host does not answer, speaks another
protocol version or drops the connection (GGML_ABORT in ggml-rpc.cpp), so the app never
registers a host in its own process: it asks here, over the same wire protocol, and runs plans
that use hosts in a llama-server child (vrampilot.server), whose death the app survives.

The protocol (ggml/src/ggml-rpc/ggml-rpc.cpp, version 7): a request is
`| cmd: u8 | size: u64 | payload |`, a reply `| size: u64 | payload |`, little-endian and
packed. The first command must be HELLO; the server then answers DEVICE_COUNT and
GET_DEVICE_MEMORY among others. A host serves one client at a time, so while a llama-server
uses it this query waits: it gives up after `timeout_s` and says so.
"""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from vrampilot.errors import UserError

PROTO_MAJOR = 7
PROTO_MINOR = 0
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24  # transport.h: capabilities for a transport upgrade (RDMA); zeros mean plain TCP
DEFAULT_PORT = 50052  # ggml-rpc-server's default
_ENDPOINT = re.compile(r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>\d{1,5})$")


class RpcHostError(UserError):
    pass


@dataclass(frozen=True)
class RpcDeviceMemory:
    index: int  # the device's number on its host
    memory_free_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True)
class RpcHost:
    endpoint: str  # host:port, as llama.cpp's --rpc takes it
    version: str
    devices: tuple[RpcDeviceMemory, ...]
    rtt_ms: float = 0.0  # one small request and its answer, as measured here


def parse_endpoint(text: str) -> tuple[str, int]:
    """ "host:port" (or "[v6]:port") -> (host, port); RpcHostError says what is wrong."""
    m = _ENDPOINT.match(text.strip())
    if not m:
        raise RpcHostError(f"{text!r} is not an RPC host: write host:port, e.g. 192.168.1.20:{DEFAULT_PORT}")
    port = int(m.group("port"))
    if not 0 < port < 65536:
        raise RpcHostError(f"{text!r}: port {port} is out of range")
    return m.group("v6") or m.group("host"), port


def parse_hosts(text: str) -> list[tuple[str, int | None]]:
    """ "host:port[=SIZE],host:port" (the CLI's --rpc, the Plan panel's field) -> [(endpoint,
    budget bytes or None)]. A budget caps what the plan puts on that host: ggml-rpc-server has no
    cap of its own and reports all its device's memory as free."""
    from vrampilot.units import parse_size

    out: list[tuple[str, int | None]] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        endpoint, _, size = item.partition("=")
        host, port = parse_endpoint(endpoint)
        key = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if any(e == key for e, _ in out):
            raise RpcHostError(f"RPC host {key} is listed twice")
        try:
            budget = parse_size(size) if size.strip() else None
        except ValueError as exc:
            raise RpcHostError(f"{item!r}: {exc}") from None
        out.append((key, budget))
    return out


def query_hosts(listed: Sequence[tuple[str, int | None]]) -> tuple[list[RpcHost], dict[str, int]]:
    """Each host `parse_hosts` listed, asked what it has (RpcHostError for one that does not
    answer), and the budgets the user gave by endpoint: what a target for them takes."""
    hosts = [query_host(endpoint) for endpoint, _ in listed]
    return hosts, {endpoint: budget for endpoint, budget in listed if budget is not None}


def query_host(endpoint: str, *, timeout_s: float = 3.0) -> RpcHost:
    """Connect, shake hands and read each device's free and total memory."""
    host, port = parse_endpoint(endpoint)
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError:
        raise RpcHostError(f"RPC host {endpoint} did not answer within {timeout_s:.0f} s") from None
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise RpcHostError(
            f"RPC host {endpoint} cannot be reached ({why}); is ggml-rpc-server running there?"
        ) from None
    try:
        with sock:
            major, minor, patch = _hello(sock, endpoint)
            t0 = time.perf_counter()
            (count,) = struct.unpack("<I", _call(sock, CMD_DEVICE_COUNT, b"", 4, endpoint))
            rtt_ms = (time.perf_counter() - t0) * 1000
            devices = []
            for i in range(count):
                free, total = struct.unpack(
                    "<QQ", _call(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", i), 16, endpoint)
                )
                devices.append(RpcDeviceMemory(i, int(free), int(total)))
    except TimeoutError:
        raise RpcHostError(
            f"RPC host {endpoint} accepted the connection but did not answer within {timeout_s:.0f} s: "
            "it serves one client at a time, and another one (a running model?) may be using it"
        ) from None
    except OSError as exc:
        raise RpcHostError(
            f"RPC host {endpoint} dropped the connection ({exc.strerror or exc}): is it a "
            "ggml-rpc-server of this llama.cpp version?"
        ) from None
    if not devices:
        raise RpcHostError(f"RPC host {endpoint} has no device (ggml-rpc-server found no backend to share)")
    return RpcHost(endpoint, f"{major}.{minor}.{patch}", tuple(devices), rtt_ms)


def _hello(sock: socket.socket, endpoint: str) -> tuple[int, int, int]:
    reply = _call(sock, CMD_HELLO, bytes(CONN_CAPS_SIZE), 4 + CONN_CAPS_SIZE, endpoint)
    major, minor, patch = reply[0], reply[1], reply[2]
    if major != PROTO_MAJOR or minor > PROTO_MINOR:
        raise RpcHostError(
            f"RPC host {endpoint} speaks RPC protocol {major}.{minor}.{patch}; this llama.cpp speaks "
            f"{PROTO_MAJOR}.{PROTO_MINOR}: run the ggml-rpc-server of the same llama.cpp version there"
        )
    return major, minor, patch


def _call(sock: socket.socket, cmd: int, payload: bytes, reply_size: int, endpoint: str) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv(sock, 8, endpoint))
    if size != reply_size:
        raise RpcHostError(
            f"{endpoint} is not a ggml-rpc-server of this version (a {size}-byte reply where {reply_size} were due)"
        )
    return _recv(sock, size, endpoint)


def _recv(sock: socket.socket, n: int, endpoint: str) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RpcHostError(f"RPC host {endpoint} closed the connection: is it a ggml-rpc-server of this version?")
        data += chunk
    return bytes(data)
