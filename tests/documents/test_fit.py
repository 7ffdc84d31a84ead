"""Fit messages and the re-plan offer, each number checked against the planner itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.gguf_models import write_header_only
from testkit.machines import cpu_machine
from vrampilot.documents import analyze_fit, needed_context, nice_ctx, tokens_text
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.units import GIB


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    d = tmp_path_factory.mktemp("m")
    return load_model_spec(write_header_only(d / "Llama-3.1-8B-Q4_K_M.gguf", "llama-3.1-8b", recipe="Q4_K_M"))


@pytest.fixture(scope="module")
def qwen7b(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    d = tmp_path_factory.mktemp("q")
    return load_model_spec(write_header_only(d / "Qwen2.5-7B-Q4_K_M.gguf", "qwen2.5-7b", recipe="Q4_K_M"))


@pytest.fixture(scope="module")
def gpu8() -> Target:
    return resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine())


def test_helpers() -> None:
    assert [nice_ctx(n) for n in (100, 600, 1025, 5000, 41000, 59000, 70000)] == [
        512,
        768,
        1536,
        6144,
        49152,
        65536,
        98304,
    ]
    assert [tokens_text(n) for n in (812, 5939, 41000, 59392)] == ["812", "5.8K", "40K", "58K"]
    assert needed_context(1000, 256) == 1000 + 256 + 512 + 64


def test_fits(llama8b: ModelSpec, gpu8: Target) -> None:
    p = plan(llama8b, gpu8, Pins(n_ctx=32768))
    r = analyze_fit(p, 20000)
    assert r.status == "fits" and r.mode == "full" and r.replan is None
    assert r.message == "fits: 20K of 32K context"


def test_needs_more_context_offers_the_planners_replan(llama8b: ModelSpec, gpu8: Target) -> None:
    p = plan(llama8b, gpu8, Pins(n_ctx=32768))
    r = analyze_fit(p, 58000, reply_tokens=512)
    assert r.status == "replan" and r.mode == "retrieval"  # until the user re-plans
    assert r.needed_tokens == 58000 + 512 + 512 + 64 and r.suggested_ctx == 65536
    # The offer is exactly what the planner says for that context pinned (it chooses the rest).
    expected = plan(llama8b, gpu8, Pins(n_ctx=65536))
    assert r.replan is not None and r.replan.settings == expected.settings and expected.fits
    kv = expected.settings.type_k
    new_tps = f"{expected.speed.decode_tps_full_ctx:.0f}"
    old_tps = f"{p.speed.decode_tps_full_ctx:.0f}"
    assert r.message == (
        f"needs 58K tokens: the current plan has 32K. At {kv} KV, 64K fits on the 8.00 GiB GPU at about "
        f"{new_tps} tokens/s (was {old_tps}); Re-plan?"
    )


def test_partial_offload_is_named_in_the_offer(llama8b: ModelSpec, gpu8: Target) -> None:
    p = plan(llama8b, gpu8, Pins(n_ctx=32768))
    r = analyze_fit(p, 99000)
    assert r.status == "replan" and r.replan is not None and r.suggested_ctx == 131072
    ngl = r.replan.settings.n_gpu_layers
    assert ngl < llama8b.n_layer + 1
    assert f"128K fits with {ngl} of {llama8b.n_layer + 1} layers on the 8.00 GiB GPU" in r.message


def test_8gb_scenario_past_the_trained_context_offers_replan_but_answers_from_retrieval(
    qwen7b: ModelSpec, gpu8: Target
) -> None:
    p = plan(qwen7b, gpu8, Pins(n_ctx=32768))
    assert (p.settings.type_k, p.fits) == ("f16", True)
    r = analyze_fit(p, 58000)
    assert r.status == "beyond_training" and r.mode == "retrieval"
    assert r.replan is not None and r.replan.settings.type_k == "q8_0" and r.replan.settings.n_ctx == 65536
    assert r.message.startswith("needs 58K tokens: the current plan has 32K. At q8_0 KV, 64K fits on the 8.00 GiB GPU")
    assert "trained for 32K" in r.message and r.message.endswith("Re-plan anyway?")


def test_too_large_for_any_plan_says_the_limit(llama8b: ModelSpec) -> None:
    small = resolve_target(TargetRequest(vram_bytes=6 * GIB), cpu_machine(ram_gib=8))
    p = plan(llama8b, small, Pins(n_ctx=8192))
    r = analyze_fit(p, 120000)
    assert r.status == "too_large" and r.mode == "retrieval" and r.replan is None
    assert r.max_ctx is not None
    assert plan(llama8b, small, Pins(n_ctx=r.max_ctx)).fits
    assert not plan(llama8b, small, Pins(n_ctx=r.max_ctx * 3 // 2)).fits
    assert f"Even the best plan for this GPU holds {r.max_ctx // 1024}K" in r.message
    assert "retrieval" in r.message


def test_embedded_model_on_the_cpu(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    p = plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=2048))
    fits = analyze_fit(p, 900, reply_tokens=256)
    assert fits.status == "fits" and fits.message == "fits: 900 of 2K context"
    grow = analyze_fit(p, 5000, reply_tokens=256)
    assert grow.status == "replan" and grow.suggested_ctx == 6144
    assert "6K fits in RAM" in grow.message
    beyond = analyze_fit(p, 20000, reply_tokens=256)
    assert beyond.status == "beyond_training" and "trained for 8K" in beyond.message
