"""Run under GGML_VK_VISIBLE_DEVICES=0 (llama.cpp skips CPU-type Vulkan devices such as Mesa's
lavapipe otherwise): plan the given model for this machine's Vulkan device with N layers
offloaded, load it for real, and print the plan's per-device bytes next to llama.cpp's buffers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.planner.measure import measure_allocations
from vrampilot.planner.search import Pins, plan
from vrampilot.planner.target import target_from_machine


def main() -> int:
    path, ngl, n_ctx, ubatch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    machine = detect_machine()
    target = target_from_machine(machine)
    out: dict[str, object] = {"devices": [d.__dict__ for d in machine.llama.devices]}
    if not target.gpus:
        print(json.dumps({**out, "error": "no Vulkan device in the target"}))
        return 0
    spec = load_model_spec(path)
    p = plan(spec, target, Pins(n_ctx=n_ctx, n_ubatch=ubatch, n_gpu_layers=ngl, n_threads=2, n_threads_batch=2),
             exact=True)  # fmt: skip
    m = measure_allocations(path, p.settings, dry_run=False)
    dev = p.memory.per_device[0]
    out.update({
        "device": target.gpus[0].buffer_name, "kind": target.gpus[0].kind,
        "plan": {"weights": dev.weights_bytes, "kv": dev.kv_bytes, "compute": dev.compute_bytes,
                 "host_compute": p.memory.host.compute_bytes, "host_kv": p.memory.host.kv_bytes},
        "n_layer": spec.n_layer, "layers": list(p.memory.device_layers(0)), "output_on_device": p.memory.output_device == 0,
        "measured": {"model": m.model_bytes, "kv": m.kv_buffer_bytes, "compute": m.compute_bytes},
    })  # fmt: skip
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
