"""Run with VRAMPILOT_SOFTWARE_GPU=1: for a MoE model and a list of settings (JSON), the plan's
bytes per device and for the host next to llama.cpp's real buffers (testkit/placement_check),
the engine's own load report (vrampilot.llamacpp.allocations) for the first settings, and the
llama-server argv the export gives for each, as one JSON line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from testkit.placement_check import compare
from vrampilot.engine import open_llama
from vrampilot.export import llama_server_argv
from vrampilot.hardware import detect_machine
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.server.binaries import tool_path


def main() -> int:
    path = Path(sys.argv[1])
    cases = [Settings(**c) for c in json.loads(sys.argv[2])]
    target = resolve_target(TargetRequest(), detect_machine())
    if not target.gpus:
        print(json.dumps({"error": "no Vulkan device in the target"}))
        return 0
    results = []
    for s in cases:
        r = compare(path, s, target)
        r["argv"] = llama_server_argv(path, s, host="127.0.0.1", server=str(tool_path("llama-server")))
        results.append(r)
    from vrampilot.llamacpp import device_allocated_bytes

    llm = open_llama(path, cases[0])
    try:
        engine = {name: device_allocated_bytes(name) for name in ("Vulkan0", "Vulkan_Host", "CPU")}
    finally:
        llm.close()
    # What made llama.cpp use lavapipe in this process (a CPU-type device it skips otherwise), for
    # the llama-server the test starts.
    visible = os.environ.get("GGML_VK_VISIBLE_DEVICES")
    print(
        json.dumps({"device": results[0]["device_names"][0], "results": results, "engine": engine, "visible": visible})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
