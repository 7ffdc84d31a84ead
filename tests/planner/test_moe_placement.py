"""Mixture-of-experts placement on the CPU build: the plan's CPU overrides reach llama.cpp (its
loader says which tensors it kept on the CPU), what it allocates is what the memory model counts,
and a placement llama.cpp or llama-server would not run as planned is refused in one line first.

The device side (experts in host memory next to offloaded layers) is tested on lavapipe in
tests/gpu/test_moe_vulkan.py; on the CPU every tensor is in host memory either way, so what these
tests show is that the overrides are applied, that nothing else moves, and the refusals.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_model, write_with_tensors_changed
from testkit.machines import cpu_machine
from testkit.placement_check import compare
from tests.gguf.refusals import one_line_refusal
from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.log_lines import PRINT_RESOLUTION_BYTES
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.errors import PlanError
from vrampilot.planner.memory.placement import cpu_override_patterns, offload_copy_bytes
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target

pytest.importorskip("llama_cpp")

# (fixture, write_model arguments): Qwen3-MoE, a Mixtral-style llama with q4_0 experts (repacked
# on x86: CPU_REPACK), gpt-oss with MXFP4 experts and attention sinks, DeepSeek-V2 with a shared
# expert and a dense first layer.
FIXTURES: dict[str, dict[str, Any]] = {
    "qwen3moe": {"arch": "qwen3moe"},
    "mixtral": {"arch": "mixtral", "weight_type": "q4_0", "tied": False},
    "gpt-oss": {"arch": "gpt-oss"},
    "deepseek2": {"arch": "deepseek2"},
}
_OVERRIDDEN = re.compile(r"^tensor (\S+) \(.*\) buffer type overridden to (\S+)")


def fixture(name: str, folder: Path) -> Path:
    kw = dict(FIXTURES[name])
    path = folder / f"{name}.gguf"
    return path if path.exists() else write_model(path, kw.pop("arch"), **kw)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("moe")
    return {name: fixture(name, d) for name in FIXTURES}


def settings(n_layer: int, n_cpu_moe: int, **kw: Any) -> Settings:
    return Settings(
        n_ctx=1024, n_ubatch=256, n_gpu_layers=n_layer + 1, n_cpu_moe=n_cpu_moe, n_threads=2, n_threads_batch=2, **kw
    )


@pytest.mark.parametrize("name", list(FIXTURES))
def test_the_overrides_reach_llama_cpp_and_the_host_holds_what_the_plan_counts(
    name: str, models: dict[str, Path]
) -> None:
    path = models[name]
    spec = load_model_spec(path)
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    for n_cpu_moe in sorted({0, 1, spec.n_layer}):
        s = settings(spec.n_layer, n_cpu_moe)
        out = compare(path, s, target)
        assert out["refused"] is None
        real, exact = out["measured"]["host"], out["exact"]["host"]
        # Weights (CPU and CPU_REPACK buffers: q4_0 and MXFP4 experts are repacked), KV and
        # output exact at the print's resolution; the compute buffer is llama.cpp's own dry run.
        for part in ("weights", "kv", "output", "compute"):
            lines = max(1, out["measured"]["kv_lines"]) if part == "kv" else 2
            assert abs(real[part] - exact[part]) <= lines * PRINT_RESOLUTION_BYTES, (name, n_cpu_moe, part, out)
        # The loader names every tensor an override kept on the CPU: exactly the routed experts of
        # layers 0..n_cpu_moe-1 (llama.cpp's LLM_FFN_EXPS_REGEX; routers and shared experts stay).
        log = measure_allocations(path, s, dry_run=True).log
        kept = {m[1] for line in log if (m := _OVERRIDDEN.match(line))}
        experts = {
            t.name
            for t in spec.tensors
            if any(re.search(p, t.name) for p in cpu_override_patterns(s)) and t.name.endswith(".weight")
        }
        assert {k for k in kept if k.endswith(".weight")} == experts
        assert all("_exps" in k and int(k.split(".")[1]) < n_cpu_moe for k in kept)
        assert len(experts) == 3 * sum(  # gate, up and down per MoE layer (deepseek2's layer 0 is dense)
            1 for il in range(min(n_cpu_moe, spec.n_layer)) if spec.layer_expert_bytes[il]
        )


def test_the_device_copy_of_a_host_expert_counts_only_where_llama_cpp_makes_it(models: dict[str, Path]) -> None:
    """At 32 tokens and more the scheduler runs a host-held expert's matmul on the device, with the
    weight copied into the device's compute buffer: the largest such tensor of an offloaded layer."""
    spec = load_model_spec(models["qwen3moe"])
    largest = max(t.n_bytes for t in spec.tensors if "_exps" in t.name)
    n = spec.n_layer
    assert offload_copy_bytes(spec, settings(n, 1), 256) == largest
    assert offload_copy_bytes(spec, settings(n, 0), 256) == 0  # nothing kept in host memory
    assert offload_copy_bytes(spec, settings(n, n), 16) == 0  # small ubatch: the CPU runs it
    # -ngl 2 offloads the output and the last layer only: layer 0's experts are on the CPU anyway
    assert offload_copy_bytes(spec, settings(n, 1).with_(n_gpu_layers=2), 256) == 0


@pytest.mark.parametrize(
    ("pins", "needle"),
    [
        ({"n_cpu_moe": -1}, "n_cpu_moe -1 is outside 0..3"),
        ({"n_cpu_moe": 4}, "n_cpu_moe 4 is outside 0..3"),
        ({"cpu_tensor_patterns": ("attn_q,attn_k",)}, "'attn_q,attn_k' contains ',' or '='"),
        ({"cpu_tensor_patterns": ("attn_q=CPU",)}, "'attn_q=CPU' contains ',' or '='"),
        ({"cpu_tensor_patterns": ("blk\\.(0",)}, "'blk\\\\.(0' is not a valid regular expression"),
        ({"cpu_tensor_patterns": ("attn_qq",)}, "'attn_qq' matches no tensor of qwen3moe.gguf"),
        ({"cpu_tensor_patterns": (r"(?<!x)blk\.0",)}, "uses '(?<', which llama.cpp's regular expressions"),
        ({"cpu_tensor_patterns": ("(?i)ATTN_Q",)}, "uses '(?i', which llama.cpp's regular expressions"),
    ],
)
def test_a_placement_llama_cpp_would_not_run_as_planned_is_refused(
    pins: dict[str, Any], needle: str, models: dict[str, Path]
) -> None:
    spec = load_model_spec(models["qwen3moe"])
    with pytest.raises(PlanError) as err:
        plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=1024, **pins))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_pattern_fixed_plans_and_loads_with_its_tensors_on_the_cpu(models: dict[str, Path]) -> None:
    path = models["qwen3moe"]
    spec = load_model_spec(path)
    fixed = r"blk\.1\.attn_(q|k)\.weight"
    p = plan(
        spec,
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=1024, cpu_tensor_patterns=(fixed,)),
    )
    assert p.fits
    m = measure_allocations(path, settings(spec.n_layer, 0, cpu_tensor_patterns=(fixed,)), dry_run=False)
    assert m.refused is None
    kept = {mm[1] for line in m.log if (mm := _OVERRIDDEN.match(line))}
    assert kept == {"blk.1.attn_q.weight", "blk.1.attn_k.weight"}


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"drop": ("blk.1.ffn_down_exps.weight",)}, "blk.1.ffn_down_exps.weight is missing"),
        ({"drop": ("blk.0.ffn_up_exps.weight",)}, "blk.0.ffn_up_exps.weight is missing"),
        ({"shapes": {"blk.2.ffn_gate_exps.weight": (128, 64, 4)}}, "blk.2.ffn_gate_exps.weight has shape [128, 64, 4]"),
        ({"shapes": {"blk.0.ffn_up_exps.weight": (128, 64 * 8)}}, "blk.0.ffn_up_exps.weight has shape [128, 512]"),
        ({"shapes": {"blk.1.ffn_down_exps.weight": (32, 128, 8)}}, "blk.1.ffn_down_exps.weight has shape [32, 128, 8]"),
        ({"shapes": {"blk.0.ffn_gate_exps.weight": (128, 32, 8)}}, "blk.0.ffn_gate_exps.weight has shape [128, 32, 8]"),
    ],
)
def test_a_moe_file_with_broken_experts_is_refused_before_anything_loads(
    change: dict[str, Any], needle: str, tmp_path: Path
) -> None:
    path = write_with_tensors_changed(tmp_path / "broken.gguf", "qwen3moe", **change)
    assert needle in one_line_refusal(path)
