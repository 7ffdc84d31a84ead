"""The settings search: the 8 GB scenario, pins, partial offload, refusals, speed of planning."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from testkit.gguf_models import write_qwen25_7b_q4_k_m
from testkit.machines import cpu_machine
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.units import GIB


@pytest.fixture(scope="module")
def qwen7b(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    path = write_qwen25_7b_q4_k_m(tmp_path_factory.mktemp("q") / "Qwen2.5-7B-Instruct-Q4_K_M.gguf")
    return load_model_spec(path)


@pytest.fixture(scope="module")
def gpu8() -> Target:
    return resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine())


def test_qwen7b_shape(qwen7b: ModelSpec) -> None:
    assert (qwen7b.n_layer, qwen7b.n_head_kv[0], qwen7b.head_dim_k) == (28, 4, 128)
    assert 4.2 * GIB < qwen7b.weight_bytes < 4.6 * GIB


def test_8gb_scenario_32k_fits_with_f16(qwen7b: ModelSpec, gpu8: Target) -> None:
    p = plan(qwen7b, gpu8, Pins(n_ctx=32768))
    assert p.fits
    s = p.settings
    assert (s.type_k, s.type_v) == ("f16", "f16")
    assert s.n_gpu_layers == qwen7b.n_layer + 1
    assert p.memory.device.total_bytes <= 8 * GIB


def test_8gb_scenario_64k_switches_to_q8_0(qwen7b: ModelSpec, gpu8: Target) -> None:
    p = plan(qwen7b, gpu8, Pins(n_ctx=65536))
    assert p.fits
    s = p.settings
    assert (s.type_k, s.type_v) == ("q8_0", "q8_0")
    assert s.n_gpu_layers == qwen7b.n_layer + 1, "KV is quantized before layers are given up"
    assert s.flash_attn
    text = " ".join(p.reasons)
    # The reason names the f16 cost and the overshoot with numbers, and the q8_0 outcome.
    assert re.search(r"f16 KV would need \d+\.\d\d GiB, \d+\.\d\d (GiB|MiB) over", text), text
    assert re.search(r"q8_0 KV \(\d+\.\d\d GiB\) fits with \d+\.\d\d (GiB|MiB) to spare", text), text
    # The f16 alternative at the same context is listed and does not fit.
    f16 = [a for a in p.alternatives if a.settings.type_k == "f16" and a.settings.n_ctx == 65536]
    assert f16 and not f16[0].fits


def test_pins_stay_pinned(qwen7b: ModelSpec, gpu8: Target) -> None:
    pins = Pins(n_ctx=65536, type_k="f16", type_v="f16", n_threads=3, n_ubatch=256, flash_attn=True)
    p = plan(qwen7b, gpu8, pins)
    s = p.settings
    assert (s.n_ctx, s.type_k, s.type_v, s.n_threads, s.n_ubatch, s.flash_attn) == (65536, "f16", "f16", 3, 256, True)
    # With f16 pinned at 64K, layers are given up instead, and the CPU layers cost speed.
    assert s.n_gpu_layers < qwen7b.n_layer + 1
    full = plan(qwen7b, gpu8, Pins(n_ctx=32768))
    assert p.speed.decode_tps < full.speed.decode_tps * 0.7
    assert any("pinned by you" in r for r in p.reasons)


def test_partial_offload_cliff(qwen7b: ModelSpec, gpu8: Target) -> None:
    speeds = [plan(qwen7b, gpu8, Pins(n_ctx=8192, n_gpu_layers=n)).speed.decode_tps for n in (29, 27, 24, 14, 0)]
    assert speeds == sorted(speeds, reverse=True)
    # Two layers on the CPU already cost a large share: the cliff.
    assert speeds[1] < speeds[0] * 0.8
    assert speeds[-1] < speeds[0] * 0.25


def test_quantized_v_without_flash_attention_is_refused(qwen7b: ModelSpec, gpu8: Target) -> None:
    p = plan(qwen7b, gpu8, Pins(n_ctx=4096, type_k="q8_0", type_v="q8_0", flash_attn=False))
    assert not p.fits
    assert p.refused is not None and "flash_attn" in p.refused


def test_unpinned_flash_off_keeps_v_unquantized(qwen7b: ModelSpec, gpu8: Target) -> None:
    p = plan(qwen7b, gpu8, Pins(n_ctx=65536, flash_attn=False))
    assert p.settings.type_v == "f16"
    assert p.refused is None


def test_cpu_only_plan(qwen7b: ModelSpec) -> None:
    p = plan(qwen7b, resolve_target(TargetRequest(cpu_only=True), cpu_machine(ram_gib=24)), Pins(n_ctx=8192))
    assert p.fits
    assert p.settings.n_gpu_layers == 0
    assert p.memory.device.total_bytes == 0
    assert p.memory.host.weights_bytes == qwen7b.weight_bytes


def test_model_that_cannot_run_suggests_a_smaller_quant(qwen7b: ModelSpec) -> None:
    tiny = resolve_target(TargetRequest(vram_bytes=3 * GIB), cpu_machine(ram_gib=4))
    p = plan(qwen7b, tiny, Pins(n_ctx=8192))
    assert not p.fits
    assert p.suggestion and ("would fit" in p.suggestion or "smaller model" in p.suggestion)
    assert any("Does not fit" in r for r in p.reasons)


def test_larger_context_alternative_reports_cost(qwen7b: ModelSpec, gpu8: Target) -> None:
    p = plan(qwen7b, gpu8, Pins(n_ctx=32768))
    labels = {a.label for a in p.alternatives}
    assert "64K context" in labels and "one fewer GPU layer" in labels
    up = next(a for a in p.alternatives if a.label == "64K context")
    assert up.memory_total_bytes > p.memory.device.total_bytes


def test_default_context_is_trained_capped(qwen7b: ModelSpec, embedded_model: Path, gpu8: Target) -> None:
    assert plan(qwen7b, gpu8).settings.n_ctx == 32768
    small = load_model_spec(embedded_model)
    assert plan(small, gpu8).settings.n_ctx == 8192


def test_planning_is_fast(qwen7b: ModelSpec, gpu8: Target) -> None:
    plan(qwen7b, gpu8, Pins(n_ctx=65536))  # warm caches
    # This process's CPU time, not the wall clock: the planner's own work, however busy the machine.
    t = time.process_time()
    for ctx in (4096, 32768, 65536, 131072):
        plan(qwen7b, gpu8, Pins(n_ctx=ctx))
    assert (time.process_time() - t) / 4 < 0.1


def test_partial_offload_when_ram_alone_is_too_small(qwen7b: ModelSpec) -> None:
    # 2.5 GiB of usable RAM cannot hold the 4.4 GiB model, but with most layers on a 4 GiB card
    # the rest fits on the host: the plan must find that range.
    target = resolve_target(TargetRequest(vram_bytes=4 * GIB), cpu_machine(ram_gib=4.5))
    p = plan(qwen7b, target, Pins(n_ctx=4096))
    assert p.fits, p.reasons
    assert 0 < p.settings.n_gpu_layers < qwen7b.n_layer + 1
    assert p.memory.host.total_bytes <= target.host_ram_bytes


# -- what a user hit in the window (reasons and settings that did not match what runs) ---------------


def test_a_refused_plan_says_why_without_memory_claims_or_a_file_suggestion(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    p = plan(
        spec,
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=2048, type_v="q4_0", flash_attn=False),
    )
    assert not p.fits and p.refused and "flash" in p.refused
    text = " ".join(p.reasons)
    assert "Does not fit in system RAM" not in text and "flash attention" in text.lower()
    assert p.suggestion is None  # no other file would change a refusal


def test_a_suggested_file_is_always_smaller_than_this_one(qwen7b: ModelSpec) -> None:
    tiny = resolve_target(TargetRequest(vram_bytes=int(2 * GIB)), cpu_machine(ram_gib=2))
    p = plan(qwen7b, tiny, Pins(n_ctx=4096))
    assert not p.fits and p.suggestion
    if p.suggestion.startswith("A "):
        size = re.search(r"about (\d+\.\d\d) (GiB|MiB)", p.suggestion)
        assert size is not None
        bytes_ = float(size.group(1)) * (GIB if size.group(2) == "GiB" else GIB / 1024)
        assert bytes_ < qwen7b.weight_bytes


def test_ubatch_never_exceeds_a_pinned_batch(qwen7b: ModelSpec, gpu8: Target) -> None:
    # llama.cpp caps ubatch at batch: planning memory for more would size a setting that never applies.
    for target in (gpu8, resolve_target(TargetRequest(cpu_only=True), cpu_machine())):
        p = plan(qwen7b, target, Pins(n_ctx=8192, n_batch=256))
        assert p.settings.n_batch == 256 and p.settings.n_ubatch <= 256
        text = " ".join(p.reasons)
        assert "batch 256: pinned by you" in text and "llama-server's defaults" not in text
        assert all(a.settings.n_ubatch <= a.settings.n_batch for a in p.alternatives)


def test_one_thread_is_singular_and_k_alone_pinned_says_so(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    p = plan(
        spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=1024, n_threads=1, type_k="q8_0")
    )
    text = " ".join(p.reasons)
    assert "1 thread:" in text and "1 threads" not in text
    assert "K q8_0 pinned by you" in text


def test_a_kv_cache_quantized_for_layers_says_so(embedded_model: Path) -> None:
    """A budget where q8_0 buys layers: the reason names the trade, never "full precision fits"
    (what it said before, next to a q8_0 cache)."""
    spec = load_model_spec(embedded_model)
    p = plan(spec, resolve_target(TargetRequest(vram_bytes=1150 * 1024 * 1024), cpu_machine()), Pins(n_ctx=8192))
    assert p.settings.type_k == "q8_0" and 0 < p.settings.n_gpu_layers < spec.n_layer + 1
    kv_reason = next(r for r in p.reasons if "KV cache (" in r)
    assert "full precision fits" not in kv_reason
    m = re.search(
        r"quantized because a full-precision cache fits only with (\d+) layers on the GPU, (\d+) with", kv_reason
    )
    assert m and int(m.group(1)) < int(m.group(2)) == p.settings.n_gpu_layers


def test_a_gpu_no_larger_than_the_margin_is_said_so_not_blamed_on_a_layer(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    small = plan(spec, resolve_target(TargetRequest(vram_bytes=300 * 2**20), cpu_machine()))
    assert small.settings.n_gpu_layers == 0
    why = " ".join(small.reasons)
    assert "300.00 MiB VRAM is no more than the 1.00 GiB kept free for the driver" in why
    assert "one more would pass" not in why
    roomy = plan(
        spec, resolve_target(TargetRequest(vram_bytes=300 * 2**20, margin_bytes=64 * 2**20), cpu_machine()), Pins()
    )
    assert roomy.settings.n_gpu_layers > 0 and "kept free for the driver" not in " ".join(roomy.reasons)


@pytest.mark.parametrize(
    ("variant", "arch", "expected"),
    [("sapphirerapids", "deepseek2", True), ("zen4", "deepseek2", False), ("sapphirerapids", "llama", False)],
)
def test_deepseek2_on_the_amx_variant_keeps_its_weights_unrepacked(
    tmp_path: Path, variant: str, arch: str, expected: bool
) -> None:
    """llama.cpp's AMX buffer takes attn_k_b, then refuses its product with the permuted queries,
    and the scheduler aborts the process: a plan for the AMX variant says --no-repack, explains it,
    and the exported line and the engine load it so; other variants and models repack as before."""
    from dataclasses import replace

    from testkit.gguf_models import write_model
    from vrampilot.export import llama_server_argv

    spec = load_model_spec(write_model(tmp_path / f"{arch}.gguf", arch))
    machine = cpu_machine()
    machine = replace(machine, llama=replace(machine.llama, cpu_variant=variant))
    p = plan(spec, resolve_target(TargetRequest(), machine), alternatives=False)
    assert p.settings.no_repack is expected
    assert ("--no-repack" in llama_server_argv(tmp_path / "m.gguf", p.settings)) is expected
    assert any(r.startswith("--no-repack: ") and "AMX" in r for r in p.reasons) is expected
