"""Run with VRAMPILOT_SOFTWARE_GPU=1: plan the embedded model on this machine with the GPU backend
pinned to Vulkan, serve the plan with the bundled llama-server and load it in the app's engine, and
print the --device value of the exported line, the devices llama-server put the model's buffers on,
and the devices the engine's model was loaded onto."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testkit.spec_server import serving
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target


def main() -> int:
    model = Path(sys.argv[1])
    machine = detect_machine()
    target = resolve_target(TargetRequest(gpu_backend="Vulkan"), machine)
    p = plan(load_model_spec(model), target, Pins(n_ctx=1024, n_threads=2, n_threads_batch=2), exact=False)
    argv = llama_server_argv(model, p.settings)
    out: dict[str, object] = {
        "devices": list(p.settings.devices),
        "device_arg": argv[argv.index("--device") + 1] if "--device" in argv else None,
        "n_gpu_layers": p.settings.n_gpu_layers,
        "reasons": list(p.reasons),
    }
    with serving(model, p.settings) as served:
        target_buffers, _ = served.buffers()
        out["served_model_buffers"] = sorted(target_buffers.get("model", {}))
    from vrampilot.engine import open_llama
    from vrampilot.llamacpp import device_allocated_bytes

    llm = open_llama(model, p.settings)
    try:
        out["engine_bytes"] = {name: device_allocated_bytes(name) for name in ("Vulkan0", "CPU")}
    finally:
        llm.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
