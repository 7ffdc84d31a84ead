"""Run with VRAMPILOT_SOFTWARE_GPU=1 (llama.cpp skips software Vulkan devices such as Mesa's
lavapipe otherwise): plan the given model for this machine's Vulkan device with the settings in
the JSON argument pinned, load it for real, and print the plan's per-device bytes next to
llama.cpp's buffers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import detect_measured_machine


def main() -> int:
    asked = json.loads(sys.argv[2])
    margin = asked.pop("margin_bytes", None)  # a device budget smaller than the device: what --margin does
    path, pins = Path(sys.argv[1]), Pins(n_threads=2, n_threads_batch=2, **asked)
    found = detect_measured_machine()
    machine = found.machine
    target = resolve_target(TargetRequest(margin_bytes=None if margin is None else int(margin)), machine, found.speed)
    out: dict[str, object] = {"devices": [d.__dict__ for d in machine.llama.devices]}
    if not target.gpus:
        print(json.dumps({**out, "error": "no Vulkan device in the target", "vulkan": machine.llama.vulkan_status}))
        return 0
    spec = load_model_spec(path)
    p = plan(spec, target, pins, exact=True)
    m = measure_allocations(path, p.settings, dry_run=False)
    dev, host = p.memory.per_device[0], p.memory.host
    out.update(
        {
            "device": target.gpus[0].buffer_name,
            "kind": target.gpus[0].kind,
            "fits": p.fits,
            "budget": target.gpus[0].memory_budget_bytes - (int(margin) if margin is not None else 0),
            "device_total": dev.total_bytes - dev.margin_bytes,
            "settings": {
                "n_gpu_layers": p.settings.n_gpu_layers,
                "type_k": p.settings.type_k,
                "type_v": p.settings.type_v,
                "flash_attn": p.settings.flash_attn,
            },
            "plan": {
                "weights": dev.weights_bytes,
                "kv": dev.kv_bytes,
                "compute": dev.compute_bytes,
                "host_weights": host.weights_bytes,
                "host_compute": host.compute_bytes,
                "host_kv": host.kv_bytes,
            },
            "n_layer": spec.n_layer,
            "layers": list(p.memory.device_layers(0)),
            "output_on_device": p.memory.output_device == 0,
            "measured": {
                "model": m.model_bytes,
                "kv": m.kv_buffer_bytes,
                "compute": m.compute_bytes,
                "refused": m.refused,
                "kv_buffers": len(m.kv_lines),
            },
        }
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
