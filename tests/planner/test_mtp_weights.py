"""A multi-token-prediction block takes no memory unless the plan drafts with it.

llama.cpp creates an MTP block's tensors with TENSOR_SKIP when the model is not loaded to draft
(llama_model_params.load_mtp off, as the engine and llama-server load it by default), so the
model buffer it allocates leaves them out; the memory model must too (planner/memory/breakdown.py,
loaded_layer_bytes). Real CPU loads of fixtures that carry an MTP block.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.gguf_models import write_deepseek4, write_model
from testkit.machines import cpu_machine
from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.log_lines import matches_print
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target


@pytest.mark.parametrize("arch", ["deepseek2", "deepseek4"])
def test_mtp_block_weights_are_not_planned_when_not_drafting(arch: str, tmp_path: Path) -> None:
    path = (
        write_deepseek4(tmp_path / "v4.gguf", n_layer=5, compress_ratios=(0, 4, 128, 4, 0), n_nextn=1)
        if arch == "deepseek4"
        else write_model(tmp_path / "v2.gguf", "deepseek2", n_layer=4, n_nextn=1)
    )
    spec = load_model_spec(path)
    assert spec.n_layer_nextn == 1
    mtp_bytes = spec.layer_weight_bytes[-1]
    assert mtp_bytes > 100_000  # a whole block: the difference is far above the print resolution
    settings = Settings(n_ctx=512)
    planned = memory_breakdown(
        spec, settings, resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    ).host.weights_bytes
    loaded = sum(measure_allocations(path, settings, dry_run=False).model_bytes.values())
    assert matches_print(planned, loaded), (planned, loaded)
    assert planned == spec.weight_bytes - mtp_bytes
