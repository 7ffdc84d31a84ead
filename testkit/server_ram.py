"""Fill a real llama-server's prompt cache and sample its resident memory (issue 57).

The test (tests/server/test_server_ram.py) and the benchmark (bench/server_ram.py) share this:
a plan whose host budget leaves `cache_mib` for the prompt cache, llama-server started with the
plan's own line (vrampilot.server.launch), then distinct prompts, one after another, until the
server has evicted cached prompts to stay within --cache-ram (its log says so: server-task.cpp
"making room for prompt cache entry" / "cache size limit reached"), while a thread samples the
process's RSS (psutil) every few milliseconds. RSS counts the weights' mapped pages once read,
which a CPU plan counts on the host in full.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
from dataclasses import dataclass, replace

import psutil

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory.server_host import PROCESS_BYTES
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import Target
from vrampilot.server import ServerConfig, free_port
from vrampilot.server.launch import launch
from vrampilot.units import MIB

EVICTED = ("making room for prompt cache entry", "cache size limit reached", "cache token limit")
WORDS = [
    "river",
    "mountain",
    "copper",
    "lantern",
    "orbit",
    "velvet",
    "harbor",
    "signal",
    "meadow",
    "quartz",
    "thunder",
    "pepper",
    "violet",
    "ember",
    "canyon",
    "glacier",
    "saddle",
    "walnut",
    "falcon",
    "marble",
    "beacon",
    "cinder",
    "prairie",
    "tundra",
    "lagoon",
]


@dataclass(frozen=True)
class RamRun:
    plan: Plan
    planned_host_bytes: int  # the plan's host total under llama-server (engine + server rows)
    peak_rss_bytes: int
    idle_rss_bytes: int  # after the model loaded, before the first prompt
    prompts: int
    evictions: int  # log lines where llama-server dropped cached prompts to keep to its limit


def plan_with_cache(spec: ModelSpec, target: Target, pins: Pins, cache_mib: int) -> Plan:
    """The plan for a host budget that leaves `cache_mib` after the engine and the server process:
    all of it for the prompt cache, or, for a model that makes checkpoints, up to half of it for
    them and the rest for the cache (planner/memory/server_host.py)."""
    first = plan(spec, target, pins)
    need = first.memory.host.total_bytes + PROCESS_BYTES + cache_mib * MIB
    return plan(spec, replace(target, host_ram_bytes=need), pins)


def prompt_text(i: int, n_words: int) -> str:
    """A prompt that shares no prefix with another index's (the cache keeps only distinct ones)."""
    rng = random.Random(i)
    return f"{i} " + " ".join(rng.choice(WORDS) for _ in range(n_words))


class _Peak:
    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            self.stop.wait(0.005)


def fill_cache(p: Plan, *, words: int, after_full: int = 3, max_prompts: int = 400) -> RamRun:
    """Serve `p`, send distinct prompts of about `words` words until llama-server has evicted
    from its prompt cache `after_full` times, and return the peak RSS seen meanwhile."""
    lines: list[str] = []
    config = ServerConfig(port=free_port(), on_log=lines.append)
    server = launch(p, config, timeout_s=600)
    try:
        pid = server.pid
        assert pid is not None
        idle = psutil.Process(pid).memory_info().rss
        peak = _Peak(pid)
        peak.thread.start()
        n = 0
        try:
            while n < max_prompts and sum(1 for x in lines if any(e in x for e in EVICTED)) < after_full:
                _complete(config, prompt_text(n, words))
                n += 1
        finally:
            peak.stop.set()
            peak.thread.join()
        evictions = sum(1 for x in lines if any(e in x for e in EVICTED))
    finally:
        server.stop()
    assert p.memory.server is not None
    return RamRun(p, p.memory.served_host_bytes, max(peak.peak, idle), idle, n, evictions)


def _complete(config: ServerConfig, prompt: str) -> None:
    conn = http.client.HTTPConnection(config.host, config.port, timeout=600)
    try:
        body = json.dumps({"prompt": prompt, "n_predict": 1, "cache_prompt": True})
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"llama-server answered {r.status}: {data[:200]!r}")
    finally:
        conn.close()
