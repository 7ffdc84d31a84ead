"""Run with VRAMPILOT_SOFTWARE_GPU=1: plan a model with a draft model on this machine's Vulkan
device (draft and target both offloaded, or the draft kept on the CPU; or drafting with the
model's own MTP block, argument "mtp"), serve the plan with the
bundled llama-server, and print the plan's per-device bytes of the target and of the draft next to
llama-server's buffer lines for each, and the completion's draft counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testkit.spec_server import serving
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import detect_machine
from vrampilot.planner.memory.breakdown import Components
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.draft import DraftRequest, plan_with_draft
from vrampilot.planner.target import TargetRequest, resolve_target


def _parts(c: Components) -> dict[str, int]:
    return {"weights": c.weights_bytes, "kv": c.kv_bytes, "compute": c.compute_bytes, "output": c.output_bytes}


def main() -> int:
    target_path, draft_arg, on_gpu = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "gpu"
    target = resolve_target(TargetRequest(), detect_machine())
    if not target.gpus:
        print(json.dumps({"error": "no Vulkan device in the target"}))
        return 0
    pins = Pins(n_ctx=1024, n_threads=2, n_threads_batch=2, n_gpu_layers=99)
    p = plan_with_draft(
        load_model_spec(target_path),
        target,
        pins,
        # "mtp": the model's own MTP block, which goes where its last layer goes
        DraftRequest("mtp", n_draft=3)
        if draft_arg == "mtp"
        else DraftRequest("draft", Path(draft_arg), n_draft=3, on_gpu=on_gpu),
        exact=True,
    )
    assert p.draft is not None and p.draft.memory is not None
    device = target.gpus[0].buffer_name or target.gpus[0].name
    out: dict[str, object] = {
        "device": device,
        "fits": p.fits,
        "draft_device": p.draft.device,
        "argv_tail": p.settings.draft_gpu_layers,
        "target": {"device": _parts(p.memory.per_device[0]), "host": _parts(p.memory.host)},
        "draft": {
            "device": _parts(p.draft.memory.per_device[0]) if p.draft.memory.per_device else {},
            "host": _parts(p.draft.memory.host),
        },
        "draft_by_device": p.draft.bytes_by_device(),
    }
    with serving(target_path, p.settings) as served:
        t, d = served.buffers()
        out["served_target"], out["served_draft"] = t, d
        # Eight tokens: two rounds of drafting at least (llama-server drafts up to three of the
        # tokens left), enough to count drafts and their acceptance; more took longer on lavapipe.
        out["timings"] = served.complete("1, 2, 3, 4, 5, 6, 7, 8,", 8)["timings"]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
