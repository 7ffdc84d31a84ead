"""The GPU speed model's published-results data and its floors, without loading any model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from testkit.dual_backend import nvidia_machine
from testkit.fake_nvml import FakeGpu
from testkit.gguf_models import ArchShape, write_shape_header_only
from testkit.machines import cpu_machine
from testkit.published import HELD_BACK, SHAPES, load_published
from vrampilot.gguf import load_model_spec
from vrampilot.hardware import LlamaBackendInfo, find_profile
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.settings import Settings
from vrampilot.planner.speed_model.predict import SpeedModel, assumed_bandwidth_share
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.units import GIB

# SmolLM2-135M's dimensions: 30 layers of 576, a model whose kernels' fixed costs dwarf its FLOPs.
TINY = ArchShape(
    arch="llama", name="tiny-135m", n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_vocab=49152
)


def test_published_rows_parse_with_a_source_each() -> None:
    rows = load_published()
    assert len(rows) >= 40
    assert all(r.source.startswith("https://") and r.build and r.date for r in rows)
    # Every card's profile exists, every model has its shape, and the held-back cards are in the data.
    assert {r.model for r in rows} <= set(SHAPES)
    for name in {r.profile for r in rows}:
        find_profile(name)
    assert {r.card for r in rows} >= HELD_BACK


def test_tiny_model_on_rtx_4090_is_held_by_the_kernel_floor(tmp_path: Path) -> None:
    """Before the floor a 135M model's 512-token prompt on an RTX 4090 profile was priced at about
    414,000 tokens/s (its FLOPs over the card's peak); llama.cpp's kernels' fixed costs hold it
    an order of magnitude lower."""
    spec = load_model_spec(write_shape_header_only(tmp_path / "tiny.gguf", TINY, recipe="Q8_0"))
    target = resolve_target(TargetRequest(profile=find_profile("RTX 4090")), cpu_machine())
    settings = Settings(n_ctx=1024, n_gpu_layers=spec.n_layer + 1)
    model = SpeedModel(spec, settings, target, memory_breakdown(spec, settings, target))
    prompt_tps = 512 / model.prefill_seconds(512, 0)
    assert 30_000 < prompt_tps < 150_000
    assert 1.0 / model.decode_seconds(1) < 2_000


def test_hbm_card_reaches_a_smaller_share_of_its_bandwidth(tmp_path: Path) -> None:
    """An A100 (2039 GB/s of HBM) decodes Llama 3 8B about as fast as an RTX 4090 (1008 GB/s of
    GDDR6X) in the published results; priced at one share for both it came out 1.6x too fast."""
    spec = load_model_spec(write_shape_header_only(tmp_path / "8b.gguf", SHAPES["llama-3-8b"], recipe="Q4_K_M"))
    machine = cpu_machine(ram_gib=64)
    tps = {}
    for name in ("A100 80GB", "RTX 4090"):
        target = resolve_target(TargetRequest(profile=find_profile(name)), machine)
        target = replace(target, gpus=tuple(replace(g, llama_name="CUDA0") for g in target.gpus))
        settings = Settings(n_ctx=1024, n_gpu_layers=spec.n_layer + 1)
        tps[name] = 1.0 / SpeedModel(spec, settings, target, memory_breakdown(spec, settings, target)).decode_seconds(
            256
        )
    assert tps["A100 80GB"] / tps["RTX 4090"] < 1.25


def test_a_detected_hbm_card_is_priced_at_hbm_s_share() -> None:
    """A card found on this machine takes its profile's memory kind and generation too, so a real
    H100 is priced at HBM's share, as a planned-for one is."""
    h100 = FakeGpu(name="NVIDIA H100 PCIe", memory_total_bytes=80 * GIB, memory_bus_width_bits=5120)
    for machine in (
        nvidia_machine((h100,)),
        replace(nvidia_machine((h100,)), llama=LlamaBackendInfo("0.3.36", True, None, None)),
    ):
        gpu = resolve_target(TargetRequest(), machine).gpus[0]
        assert (gpu.memory_kind, gpu.generation) == ("hbm", "hopper")
        assert assumed_bandwidth_share(gpu) < 0.5
