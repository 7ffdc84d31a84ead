"""DeepSeek-V4's and V3.2's caches on a real Vulkan device (Mesa's lavapipe): per device, exactly.

llama.cpp puts each layer's share of every DeepSeek-V4 cache (raw window, CSA, HCA, indexer) and
of its compressor states on the layer's device (llama_kv_cache and llama_dsv4_comp_state pick the
CPU buffer type only when offload_kqv is off), and V3.2's MLA and indexer caches likewise. The plan
(planner/memory/breakdown.py) must say so: for each fixture shape, full and partial offload, contexts,
sequences (unified or not), swa_full, cache types and flash attention, the plan's KV bytes on the
device and on the host equal llama.cpp's `Vulkan0` and `CPU` KV and state buffers, at the
resolution of its log (0.01 MiB per buffer line), and every part matches its log line as on the
CPU (testkit/kv_checks.py). Loads are real (no_alloc prints no buffer sizes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.kv_checks import DSA_SHAPES, DSV4_SHAPES, settings_grid
from tests.gpu.conftest import run_child
from vrampilot.planner.dry_run.log_lines import PRINT_RESOLUTION_BYTES

pytestmark = pytest.mark.slow

# (architecture, fixture shape, -ngl values: partial offloads and every layer with the output)
SHAPES: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "dsv4-default": ("deepseek4", DSV4_SHAPES["default"], (1, 3, 5)),  # 4 layers, ratios 0/4/128/4
    "dsv4-wide": ("deepseek4", DSV4_SHAPES["wide"], (2, 4, 7)),  # 6 layers, window 256, heads 128
    "dsv4-no-hca": ("deepseek4", DSV4_SHAPES["no-hca"], (2, 4)),  # 3 layers, CSA only, window 64
    # an MTP block (ratio 0, the pattern a drafting MTP layer needs), placed as a layer
    "dsv4-mtp": ("deepseek4", {**DSV4_SHAPES["mtp"], "compress_ratios": (0, 4, 128, 4, 0)}, (1, 2, 6)),
    # drafting with it: the MTP draft context's window cache follows the MTP layer too
    "dsv4-mtp-draft": (
        "deepseek4",
        {**DSV4_SHAPES["mtp"], "compress_ratios": (0, 4, 128, 4, 0), "head_dim": 128},
        (1, 2, 6),
    ),
    "dsv32-default": ("deepseek32", DSA_SHAPES["default"], (1, 2, 4)),  # 3 layers (1 dense)
    "dsv32-wide": ("deepseek32", DSA_SHAPES["wide"], (2, 6)),  # 5 layers, latent 256 + 64
    "dsv32-v32-widths": ("deepseek32", DSA_SHAPES["v32-widths"], (3, 5)),  # latent 512 + 64, indexer 128
}


def _cases(arch: str) -> list[dict[str, Any]]:
    full = (False, True) if arch == "deepseek4" else (False,)
    grid = settings_grid((512, 4096, 70000), (128, 512, 2048), swa_full=full)
    step = 4 if arch == "deepseek4" else 2  # every layout of sequences and every cache type is visited
    keys = ("n_ctx", "n_seq", "kv_unified", "swa_full", "type_k", "type_v", "flash_attn", "n_ubatch")
    return [{k: getattr(s, k) for k in keys} for s in grid[::step]]


def _shape_cases(name: str) -> list[dict[str, Any]]:
    arch, _, ngls = SHAPES[name]
    draft = {"spec_type": "mtp", "draft_n_max": 1} if name.endswith("-draft") else {}
    return [dict(c, n_gpu_layers=ngl, **draft) for ngl in ngls for c in _cases(arch)]


@pytest.mark.parametrize("name", SHAPES)
def test_each_device_holds_the_cache_the_plan_put_there(name: str, tmp_path: Path) -> None:
    arch, shape, _ = SHAPES[name]
    cases = _shape_cases(name)
    out = run_child("kv_parts_child.py", arch, json.dumps(shape), json.dumps(cases), str(tmp_path), cpu_s=1800)
    assert "error" not in out, out
    device, n_layer = str(out["device"]), int(out["n_layer"])
    partial = False
    for case in out["cases"]:
        assert case["refused"] is None and case["parts_error"] is None, case
        measured, lines = case["measured"], case["buffer_lines"]
        assert set(measured) <= {device, "CPU"}, case  # no other buffer type holds a cache
        for where, planned in ((device, case["plan_device_kv"]), ("CPU", case["plan_host_kv"])):
            # each buffer line is printed to 0.01 MiB
            assert abs(measured.get(where, 0) - planned) <= lines.get(where, 0) * PRINT_RESOLUTION_BYTES, (where, case)
            assert (planned > 0) == (where in measured), (where, case)
        assert case["plan_device_kv"] + case["plan_host_kv"] == case["plan_total_kv"]
        ngl = case["settings"]["n_gpu_layers"]
        assert case["device_layers"] == list(range(max(n_layer + 1 - ngl, 0), n_layer)), case
        partial |= 0 < len(case["device_layers"]) < n_layer
        assert (case["draft_bytes"] > 0) == (case["settings"].get("spec_type") == "mtp"), case
    assert partial  # each shape is also split between the device and the host
