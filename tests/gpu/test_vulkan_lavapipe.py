"""The device side of the plan against a real device's allocations: llama.cpp's Vulkan backend
on Mesa's lavapipe (a Vulkan device on the CPU, package mesa-vulkan-drivers).

For each model and setting the plan's weights and KV cache on the device and on the host must be
exactly llama.cpp's buffers (at the resolution of its log, 0.01 MiB), the KV left on the host
too, and each compute buffer within 5%: partial and full offload, contexts from 1K to 8K, ubatch sizes, f16 and q8_0 K/V
caches, a sliding-window model (Gemma 3), a mixture of experts (Qwen3-MoE) and a q4_0 model (a
type the CPU backend repacks; on the device it is stored as it is).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_model
from tests.gpu.conftest import child_json
from vrampilot.paths import embedded_model_path
from vrampilot.units import MIB

pytestmark = pytest.mark.slow
PRINT_MIB = 0.005 * MIB + 1


def run_child(model: Path, **pins: object) -> dict[str, Any]:
    return child_json("vulkan_child.py", str(model), json.dumps(pins))


def model_file(name: str, tmp_path: Path) -> Path:
    if name == "smollm2":
        path = embedded_model_path()
        assert path is not None
        return path
    arch, _, weight_type = name.partition(":")
    shape: dict[str, Any] = {"n_layer": 6} if arch in ("qwen2", "llama") else {}
    return write_model(
        tmp_path / f"{arch}-{weight_type or 'f16'}.gguf", arch, weight_type=weight_type or "f16", **shape
    )


CASES = [
    # model, -ngl, n_ctx, ubatch, K/V type, flash attention
    ("smollm2", 12, 2048, 512, "f16", None),
    ("smollm2", 12, 8192, 256, "f16", None),
    ("smollm2", 31, 4096, 512, "f16", None),  # every layer and the output
    ("smollm2", 31, 1024, 128, "q8_0", True),
    ("smollm2", 6, 4096, 512, "q8_0", True),
    ("qwen2", 4, 2048, 512, "f16", None),
    ("gemma3", 3, 4096, 256, "f16", None),  # sliding-window layers
    ("gemma3", 7, 8192, 512, "q8_0", True),
    ("qwen3moe", 2, 2048, 512, "f16", None),  # experts
    ("qwen3moe", 4, 4096, 256, "f16", None),
    ("llama:q4_0", 3, 2048, 512, "f16", None),  # q4_0 weights on the device
]


@pytest.mark.parametrize(("model", "ngl", "n_ctx", "ubatch", "kv_type", "fa"), CASES)
def test_the_device_holds_what_the_plan_put_there(
    model: str, ngl: int, n_ctx: int, ubatch: int, kv_type: str, fa: bool | None, tmp_path: Path
) -> None:
    out = run_child(
        model_file(model, tmp_path),
        n_gpu_layers=ngl,
        n_ctx=n_ctx,
        n_ubatch=ubatch,
        type_k=kv_type,
        type_v=kv_type,
        flash_attn=fa,
    )
    assert "error" not in out, out
    name = str(out["device"])
    plan, measured = out["plan"], out["measured"]
    assert isinstance(plan, dict) and isinstance(measured, dict)
    assert measured["refused"] is None
    model_bufs, kv_bufs, compute_bufs = measured["model"], measured["kv"], measured["compute"]
    assert abs(model_bufs[name] - plan["weights"]) <= PRINT_MIB  # exactly the planned tensors
    # The offloaded layers' KV, exact: each cache (a sliding-window model has two) is printed
    # to 0.01 MiB, so the sum read back is within half of that per cache.
    kv_print = PRINT_MIB * max(1, int(measured["kv_buffers"]))
    assert abs(kv_bufs.get(name, 0) - plan["kv"]) <= kv_print
    assert abs(compute_bufs[name] - plan["compute"]) <= 0.05 * compute_bufs[name]
    # What stays behind: the host's KV and compute. (Its weights are mapped from the file, a
    # buffer that spans the file's range rather than the tensors read: not a figure to plan.)
    assert abs(kv_bufs.get("CPU", 0) - plan["host_kv"]) <= kv_print
    host_compute = compute_bufs.get("Vulkan_Host", 0) + compute_bufs.get("CPU", 0)
    assert abs(host_compute - plan["host_compute"]) <= max(0.05 * host_compute, PRINT_MIB)
    # -ngl counts the output layer first, then the repeating layers from the last one down
    # (llama.cpp's rule): 12 on SmolLM2 is the output and layers 19-29 of its 30.
    n_layer = int(out["n_layer"])
    assert out["output_on_device"]
    assert out["layers"] == list(range(n_layer + 1 - min(ngl, n_layer + 1), n_layer))


@pytest.mark.parametrize("room_mib", [60, 120])
def test_a_device_budget_smaller_than_the_model_backs_off_to_what_fits(room_mib: int) -> None:
    """The device capped (its usable memory set to `room_mib` by a margin, as `--margin` does):
    the planner gives up layers until the device part fits, and llama.cpp's real buffers on the
    device are what the plan said, inside the cap."""
    model = embedded_model_path()
    assert model is not None
    full = run_child(model, n_ctx=4096, n_ubatch=512)
    assert full["settings"]["n_gpu_layers"] == int(full["n_layer"]) + 1
    budget = int(full["budget"])
    out = run_child(model, n_ctx=4096, n_ubatch=512, margin_bytes=budget - room_mib * MIB)
    assert out["fits"], out
    settings, measured, name = out["settings"], out["measured"], str(out["device"])
    assert isinstance(settings, dict) and isinstance(measured, dict)
    assert 0 < settings["n_gpu_layers"] < int(out["n_layer"]) + 1  # a partial offload, not the CPU
    used = measured["model"][name] + measured["kv"].get(name, 0) + measured["compute"][name]
    assert used <= room_mib * MIB, f"{used / MIB:.1f} MiB on the device, {room_mib} allowed"
    assert int(out["device_total"]) <= room_mib * MIB
    assert abs(used - int(out["device_total"])) <= 0.05 * used
