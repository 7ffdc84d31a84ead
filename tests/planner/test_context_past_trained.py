"""A context past the model's trained length runs the same in llama-server and in the app (issue 58,
item 2): the plan carries YaRN scaling that lifts llama-server's per-slot cap, or caps the context
where the model's own RoPE scaling is not YaRN. The real server is asked in tests/server."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from testkit.machines import cpu_machine
from vrampilot.export import llama_cpp_kwargs, llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.planner.memory.rope import _trained_after, slot_ctx, with_context_extension
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target


def _flags(argv: list[str], *names: str) -> dict[str, str]:
    return {n: argv[argv.index(n) + 1] for n in names if n in argv}


def test_a_context_twice_the_trained_one_carries_yarn_by_two(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    assert spec.n_ctx_train == 8192
    p = plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=16384))
    assert p.settings.n_ctx == 16384
    assert (p.settings.rope_scale, p.settings.yarn_orig_ctx) == (2.0, 8192)
    argv = llama_server_argv(spec.path, p.settings)
    assert _flags(argv, "--rope-scaling", "--rope-scale", "--yarn-orig-ctx") == {
        "--rope-scaling": "yarn",
        "--rope-scale": "2",
        "--yarn-orig-ctx": "8192",
    }
    kw = llama_cpp_kwargs(p.settings)
    assert (kw["rope_scaling_type"], kw["rope_freq_scale"], kw["yarn_orig_ctx"]) == (2, 0.5, 8192)
    assert any("YaRN RoPE scaling by 2 from 8K" in r and "caps each slot at 8K" in r for r in p.reasons)


def test_a_context_within_the_trained_one_carries_none(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    p = plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=8192))
    assert (p.settings.rope_scale, p.settings.yarn_orig_ctx) == (0.0, 0)
    argv = llama_server_argv(spec.path, p.settings)
    assert "--rope-scaling" not in argv and "rope_scaling_type" not in llama_cpp_kwargs(p.settings)
    assert not any("YaRN" in r for r in p.reasons)


def test_an_uneven_ratio_still_reaches_the_whole_slot(embedded_model: Path) -> None:
    """llama.cpp truncates orig / (1/scale) in float32: the scale is rounded up until it covers."""
    spec = load_model_spec(embedded_model)
    for n_ctx in (8448, 12000, 12288, 20000, 100_000):
        s = with_context_extension(
            spec, plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=n_ctx)).settings
        )
        assert _trained_after(s.yarn_orig_ctx, s.rope_scale) >= slot_ctx(spec, s), n_ctx


def test_a_model_with_linear_scaling_is_capped_at_its_trained_context(embedded_model: Path) -> None:
    spec = replace(load_model_spec(embedded_model), rope_scaling_type="linear", rope_scaling_factor=2.0)
    p = plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=16384))
    assert p.settings.n_ctx == 8192 and p.settings.rope_scale == 0.0
    assert "-c" in (argv := llama_server_argv(spec.path, p.settings)) and argv[argv.index("-c") + 1] == "8192"
    assert any("Capped at the trained 8K (asked 16K)" in r for r in p.reasons)
