"""Child of test_moe_vulkan: an exact plan with every layer's experts in RAM on the Vulkan device,
then the compute buffers it predicts for settings it did not measure (no experts in RAM, other
ubatches) beside llama.cpp's dry run of them. Prints one JSON line."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from testkit.gguf_models import BIG, write_shape_header_only
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.planner.dry_run.graph import graph_compute
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target


def main() -> None:
    path = write_shape_header_only(Path(tempfile.mkdtemp()) / "v2-lite.gguf", BIG["deepseek-v2-lite"], recipe="Q4_K_M")
    spec = load_model_spec(path)
    target = resolve_target(TargetRequest(), detect_machine())
    pins = Pins(n_ctx=2048, n_cpu_moe=spec.n_layer, n_gpu_layers=spec.n_layer + 1, n_ubatch=512)
    p = plan(spec, target, pins, exact=True, alternatives=False)
    rows = []
    for ubatch in (256, 1024):
        other = p.settings.with_(n_cpu_moe=0, n_ubatch=ubatch)
        predicted = memory_breakdown(spec, other, target, p.graph)
        m = graph_compute(spec.path, other, tuple(g.llama_name or "" for g in target.gpus))
        assert m is not None and not m.refused
        rows.append(
            {
                "ubatch": ubatch,
                "predicted": predicted.device.compute_bytes + predicted.host.compute_bytes,
                "llama": m.total_bytes,
            }
        )
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
