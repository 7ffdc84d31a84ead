"""A real llama-server running a plan with speculative decoding: its buffer lines split into the
target's and the draft's, and the draft counts its completions report (tests and bench/speculative.py).

llama-server loads the target, then logs "loading draft model" and loads the draft with its own
context (common/speculative.cpp), so the buffer lines before that line are the target's and the
ones after it the draft's. Drafting with the model's MTP block loads no model: llama-server logs
"creating MTP draft context" and creates the draft context on the model's weights; once drafting
starts it reserves that context's compute buffer again for its backend sampler (the same buffer,
not a second one), so the draft's lines end where it adds the drafter.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrampilot.export import llama_server_argv
from vrampilot.llamacpp import device_buffers
from vrampilot.planner.settings import Settings
from vrampilot.server import ServerProcess, free_port, tool_env, tool_path

DRAFT_MARK = "loading draft model"
MTP_MARK = "creating MTP draft context"
DRAFTER_MARK = "adding speculative implementation"
Buffers = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Served:
    base_url: str
    process: ServerProcess

    def buffers(self) -> tuple[Buffers, Buffers]:
        """(target's, draft's) buffers by kind and buffer name, from the load log."""
        lines = self.process.lines()
        cut = next((i for i, line in enumerate(lines) if DRAFT_MARK in line or MTP_MARK in line), len(lines))
        end = next((i for i, line in enumerate(lines) if i > cut and DRAFTER_MARK in line), len(lines))
        return device_buffers(lines[:cut]), device_buffers(lines[cut:end])

    def reserves_after_drafter(self) -> list[dict[str, int]]:
        """The draft context's compute buffers as reserved again once the drafter is added."""
        lines = self.process.lines()
        start = next((i for i, line in enumerate(lines) if DRAFTER_MARK in line), len(lines))
        return [device_buffers([line])["compute"] for line in lines[start:] if "compute buffer size" in line]

    def complete(self, prompt: str, n_predict: int) -> dict[str, Any]:
        """One greedy completion; its `timings` carry draft_n and draft_n_accepted when drafting."""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": False}
        req = urllib.request.Request(
            self.base_url + "/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        # No deadline of its own: the caller bounds the whole run by the work it does (tests/waits.py),
        # since on a busy machine lavapipe's shaders took over 300 s for one reply.
        with urllib.request.urlopen(req) as r:
            out: dict[str, Any] = json.load(r)
        return out


@contextmanager
def serving(model: str | Path, settings: Settings) -> Iterator[Served]:
    """llama-server running `settings` (its load log at info level, for the buffer lines)."""
    port = free_port()
    argv = llama_server_argv(model, settings, host="127.0.0.1", port=port, server=str(tool_path("llama-server")))
    server = ServerProcess([*argv, "-lv", "4"], tool_env())
    server.start()
    try:
        base = f"http://127.0.0.1:{port}"
        server.wait_ready(base, timeout_s=3600)  # the caller bounds the run by work, as above
        yield Served(base, server)
    finally:
        server.stop()
