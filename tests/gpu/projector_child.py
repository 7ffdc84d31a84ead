"""Run with VRAMPILOT_SOFTWARE_GPU=1: plan a model with a projector for this machine's Vulkan
device (pins in the JSON argument), then load it for real and print the plan's projector bytes
next to what clip.cpp printed (the backend it chose, its model size, each compute buffer):

    projector_child.py server MODEL MMPROJ PINS        the bundled llama-server with the plan's argv
    projector_child.py engine MODEL MMPROJ PINS IMAGE  the in-process engine, which then answers
                                                       one image turn (the PNG the test wrote)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from testkit.projector_check import serve_and_read
from vrampilot.engine import Engine, SamplingParams, projector_of
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.message import Message
from vrampilot.planner.memory.projector import ClipBuffers, clip_buffers
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target


def main() -> int:
    mode, model, mmproj, asked = sys.argv[1], Path(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
    target = resolve_target(TargetRequest(), detect_machine())
    if not target.gpus:
        print(json.dumps({"error": "no Vulkan device in the target"}))
        return 0
    p = plan(load_model_spec(model), target, Pins(n_threads=2, n_threads_batch=2, mmproj_path=mmproj, **asked))
    out: dict[str, Any] = {"device_name": target.gpus[0].llama_name}
    if mode == "server":
        served = serve_and_read(p)
        out["argv"], printed = list(served.argv), served.printed
    else:
        printed, p = _in_process(p, sys.argv[5], out)
    proj = p.memory.projector
    assert proj is not None
    out["plan"] = {
        "device": proj.device,
        "weights": proj.weights_bytes,
        "compute": proj.compute_bytes,
        "host_compute": proj.host_compute_bytes,
        "source": proj.source,
        "device_projector": [c.projector_bytes for c in p.memory.per_device],
        "host_projector": p.memory.host.projector_bytes,
        "image_tokens": proj.spec.image_tokens,
    }
    out["printed"] = {"backend": printed.backend, "model": printed.model_bytes, "compute": printed.compute_bytes}
    print(json.dumps(out))
    return 0


def _in_process(p: Plan, image: str, out: dict[str, Any]) -> tuple[ClipBuffers, Plan]:
    engine = Engine()
    loaded = engine.load(p, backoff=False)
    try:
        projector = projector_of(engine._require())
        assert projector is not None
        reply = engine.chat([Message("user", "What is this?", images=(image,))], SamplingParams(max_tokens=4, seed=1))
    finally:
        engine.unload()
    out["prompt_tokens"] = reply.stats.prompt_tokens
    return clip_buffers(projector.log_lines), loaded.plan


if __name__ == "__main__":
    raise SystemExit(main())
