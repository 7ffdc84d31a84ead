"""A vision projector's bytes in the plan against what llama.cpp allocated for it, per device.

    python bench/projector.py                  # this machine's devices (a GPU if llama.cpp has one)
    python bench/projector.py --software-gpu   # also Mesa's lavapipe Vulkan device, as the tests do

For each projector (testkit/mmproj.py: LLaVA-style `mlp` and Gemma 3's `gemma3`, small and larger,
random weights, output width 576 for the embedded SmolLM2) and each place clip.cpp can put it (the
first GPU; the CPU with --no-mmproj-offload), with flash attention on and off: the plan is made for
the embedded model with the projector, the bundled llama-server is started with the plan's own
argv, and clip.cpp's load report (the backend it chose, its model size, each compute buffer) is
printed beside the plan's figures, in bytes. llama.cpp prints MiB with two decimals: a difference
under 5,243 bytes is its rounding. docs/vision.md holds this table from one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROJECTORS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("mlp", {"image_size": 224}, "mlp 224 px, ViT 64 wide"),
    ("gemma3", {"image_size": 224, "n_merge": 4}, "gemma3 224 px, ViT 64 wide"),
    ("mlp", {"image_size": 448, "n_embd": 256, "n_ff": 1024, "n_layer": 4}, "mlp 448 px, ViT 256 wide"),
    (
        "gemma3",
        {"image_size": 448, "n_embd": 256, "n_ff": 1024, "n_layer": 4, "n_merge": 4},
        "gemma3 448 px, ViT 256 wide",
    ),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--software-gpu", action="store_true", help="let llama.cpp use software Vulkan devices (lavapipe)")
    args = ap.parse_args()
    if args.software_gpu:
        os.environ["VRAMPILOT_SOFTWARE_GPU"] = "1"  # read when llama.cpp's backends load, below

    from testkit.mmproj import write_projector
    from testkit.projector_check import serve_and_read
    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware import detect_machine
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan
    from vrampilot.planner.target import TargetRequest, resolve_target

    model = embedded_model_path()
    if model is None:
        print("the embedded model is not installed", file=sys.stderr)
        return 2
    spec = load_model_spec(model)
    target = resolve_target(TargetRequest(), detect_machine())
    places = [True] + ([False] if target.gpus else [])  # keep on the CPU; offload to the first GPU
    print(
        "| projector | device | flash attention | weights: plan / printed | compute: plan / printed | CPU buffer beside: plan / printed |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind, shape, label in PROJECTORS:
            path = write_projector(Path(tmp) / f"mmproj-{label.replace(' ', '-')}.gguf", kind, n_embd_text=576, **shape)
            for on_cpu in places:
                for fa in (True, False):
                    pins = Pins(
                        n_ctx=2048,
                        n_gpu_layers=spec.n_layer + 1,
                        flash_attn=fa,
                        mmproj_path=str(path),
                        mmproj_cpu=on_cpu or None,
                    )
                    p = plan(spec, target, pins)
                    proj = p.memory.projector
                    assert proj is not None
                    printed = serve_and_read(p).printed
                    where = printed.backend
                    beside = (
                        "–"
                        if where == "CPU"
                        else f"{proj.host_compute_bytes:,} / {printed.compute_bytes.get('CPU', 0):,}"
                    )
                    print(
                        f"| {label} | {where} | {'on' if fa else 'off'} | {proj.weights_bytes:,} / {printed.model_bytes:,} "
                        f"| {proj.compute_bytes:,} / {printed.compute_bytes.get(where, 0):,} | {beside} |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
