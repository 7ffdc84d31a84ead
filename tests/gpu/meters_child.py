"""Run with VRAMPILOT_SOFTWARE_GPU=1: plan the model at argv[2] for this machine's Vulkan device with
`n_gpu_layers` (argv[1]), load it in the engine, reply while the meters sample, and print what the
meters read during the reply and after the model is unloaded, next to the plan (JSON)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from vrampilot.engine import Engine, SamplingParams
from vrampilot.gguf import load_model_spec
from vrampilot.message import Message
from vrampilot.meters import MeterSample
from vrampilot.meters.sampler import Sampler
from vrampilot.meters.state import MeterState
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import detect_measured_machine


def main() -> int:
    path = Path(sys.argv[2])
    found = detect_measured_machine()
    target = resolve_target(TargetRequest(), found.machine, found.speed)
    p = plan(
        load_model_spec(path),
        target,
        Pins(n_gpu_layers=int(sys.argv[1]), n_ctx=2048, n_threads=2, n_threads_batch=2),
        exact=True,
    )
    state = MeterState()
    state.set_plan(p)
    sampler = Sampler(interval_s=0.25)
    during: list[dict[str, object]] = []
    replying = threading.Event()

    def on_sample(sample: MeterSample) -> None:
        readout = state.update(sample)
        if replying.is_set() and readout.vram:
            v = readout.vram[0]
            during.append(
                {
                    "name": v.name,
                    "total": v.total_bytes,
                    "used": v.used_bytes,
                    "free": v.free_bytes,
                    "process": v.process_bytes,
                    "source": v.process_source,
                    "planned": v.planned.used_bytes if v.planned else None,
                }
            )

    sampler.subscribe(on_sample)
    engine = Engine()
    engine.load(p, backoff=False)
    sampler.start()
    replying.set()
    # Eight tokens: what is read is the buffers of the loaded model and its context, which a longer
    # reply does not change; it only took longer on lavapipe (a few tokens a second).
    reply = engine.chat([Message("user", "Count from one to twenty.")], SamplingParams(max_tokens=8, seed=1))
    while len(during) < 2:  # two readings at least, however quickly the reply ended
        sampler.sample_once()
    replying.clear()
    engine.unload()
    after = sampler.sample_once()
    sampler.close()
    dev = p.memory.per_device[0]
    print(
        json.dumps(
            {
                "devices": [
                    {"name": d.name, "vendor": d.vendor, "total": d.memory_total_bytes} for d in sampler.devices
                ],
                "status": sampler.gpu_status,
                "during": during,
                "tokens": reply.stats.completion_tokens,
                "plan_device_bytes": dev.weights_bytes + dev.kv_bytes + dev.compute_bytes + dev.output_bytes,
                "after_process": after.gpus[0].process_memory_used_bytes if after.gpus else "no gpus",
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
