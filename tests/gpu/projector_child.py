"""Run with VRAMPILOT_SOFTWARE_GPU=1: plan the embedded model with a projector for this machine's
Vulkan device (pins in the JSON argument), start the bundled llama-server with the plan's own
argv, and print the plan's projector bytes next to what clip.cpp printed while llama-server
loaded it (the backend it chose, its model size and each compute buffer)."""

from __future__ import annotations

import json
import sys

from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.planner.projector import clip_buffers
from vrampilot.planner.search import plan
from vrampilot.planner.target import target_from_machine
from vrampilot.server import ServerConfig, free_port
from vrampilot.server.launch import prepare, wait_ready


def main() -> int:
    mmproj, asked = sys.argv[1], json.loads(sys.argv[2])
    model = embedded_model_path()
    assert model is not None
    target = target_from_machine(detect_machine())
    if not target.gpus:
        print(json.dumps({"error": "no Vulkan device in the target"}))
        return 0
    p = plan(load_model_spec(model), target, Pins(n_threads=2, n_threads_batch=2, mmproj_path=mmproj, **asked))
    proj = p.memory.projector
    assert proj is not None
    lines: list[str] = []
    config = ServerConfig("127.0.0.1", free_port(), None, on_log=lines.append)
    server = prepare(p, config)  # what `vrampilot serve` starts
    argv = list(server.argv)
    server.argv += ["-lv", "4"]  # clip.cpp's load report is logged at this verbosity
    server.start()
    try:
        wait_ready(server, config, timeout_s=300)
    finally:
        server.stop()
    printed = clip_buffers(lines)
    out = {
        "device_name": target.gpus[0].llama_name,
        "argv": argv,
        "plan": {
            "device": proj.device,
            "weights": proj.weights_bytes,
            "compute": proj.compute_bytes,
            "host_compute": proj.host_compute_bytes,
            "source": proj.source,
            "device_projector": [c.projector_bytes for c in p.memory.per_device],
            "host_projector": p.memory.host.projector_bytes,
        },
        "printed": {"backend": printed.backend, "model": printed.model_bytes, "compute": printed.compute_bytes},
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
