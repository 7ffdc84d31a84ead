"""llama.cpp's buffer lines, per device: what it really allocated, as its log says.

    load_tensors: RPC0[127.0.0.1:50053] model buffer size =    73.08 MiB
    llama_kv_cache:      CUDA0 KV buffer size =   448.00 MiB
    llama_dsv4_comp_state:      CUDA0 DSV4 csa state buffer size =     0.50 MiB
    sched_reserve:  CUDA_Host compute buffer size =    24.01 MiB

llama-server prefixes each line with a time and a level ("0.00.218.587 I "), which is dropped.
Standard library only: bench/device_check/check.py reads a GPU machine's logs with it where
nothing else of the app is installed. vrampilot.planner.dry_run.measure builds its fuller parse on these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MIB = 1024 * 1024
MODEL_RE = re.compile(r"^load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
OUTPUT_RE = re.compile(r"^llama_context:\s+(\S+)\s+output buffer size =\s+([\d.]+) MiB")
KVBUF_RE = re.compile(r"^llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
# DeepSeek-V4's compressor states: KV-cache memory of the layer's device, in buffers of their own.
STATE_BUF_RE = re.compile(r"^llama_dsv4_comp_state:\s+(\S+) DSV4 \w+ state buffer size =\s+([\d.]+) MiB")
COMPUTE_RE = re.compile(r"^sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
SERVER_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [IWEDT] ")


def mib(text: str) -> int:
    return round(float(text) * MIB)


def device_buffers(lines: Iterable[str]) -> dict[str, dict[str, int]]:
    """{"model"|"kv"|"compute"|"output": {buffer name: bytes}} from llama.cpp's (or llama-server's) log."""
    out: dict[str, dict[str, int]] = {"model": {}, "kv": {}, "compute": {}, "output": {}}
    for raw in lines:
        line = SERVER_PREFIX.sub("", raw.strip())
        for kind, rx in (
            ("model", MODEL_RE),
            ("kv", KVBUF_RE),
            ("kv", STATE_BUF_RE),
            ("compute", COMPUTE_RE),
            ("output", OUTPUT_RE),
        ):
            m = rx.match(line)
            if m:
                out[kind][m[1]] = out[kind].get(m[1], 0) + mib(m[2])
                break
    return out
