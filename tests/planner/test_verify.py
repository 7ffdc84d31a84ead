"""`plan --verify`: the finished plan checked against llama.cpp's own dry run."""

from __future__ import annotations

from pathlib import Path

from testkit.machines import cpu_machine
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.search.verify import verify_plan
from vrampilot.planner.target import TargetRequest, resolve_target


def test_verify_embedded_plan(embedded_model: Path) -> None:
    p = plan(
        load_model_spec(embedded_model), resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=4096)
    )
    v = verify_plan(p)
    assert v.refused is None
    # KV is exact; llama.cpp prints MiB with two decimals.
    assert abs(v.kv_predicted_bytes - v.kv_llama_bytes) <= 0.005 * 1024**2
    assert abs(v.compute_error_pct) < 5.0
    assert abs(v.output_predicted_bytes - v.output_llama_bytes) <= 0.005 * 1024**2
    assert v.as_dict()["compute"]["llama_cpp"] == v.compute_llama_bytes


def test_verify_reports_a_refusal(embedded_model: Path) -> None:
    pins = Pins(n_ctx=2048, type_k="q8_0", type_v="q8_0", flash_attn=False)
    p = plan(load_model_spec(embedded_model), resolve_target(TargetRequest(cpu_only=True), cpu_machine()), pins)
    assert p.refused == "quantized V cache requires flash_attn to be enabled"
    assert verify_plan(p).refused == p.refused
