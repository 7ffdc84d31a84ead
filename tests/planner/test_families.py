"""Every architecture of the vendored llama.cpp: its cache planned by the verified formula, or
routed to llama.cpp's own count (issue #45, item 2)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from testkit.gguf_models import ARCHITECTURES, shape_of, write_model, write_renamed
from testkit.machines import cpu_machine
from vrampilot.commands.plan_report import format_plan, plan_to_dict
from vrampilot.gguf import load_model_spec
from vrampilot.planner.errors import PlanError
from vrampilot.planner.families import (
    COUNTED_BY_LLAMA_CPP,
    LLAMA_CPP_ARCHITECTURES,
    VERIFIED,
    is_routed,
    is_verified,
    loadable,
)
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.memory.compute import FORMULA
from vrampilot.planner.search.choose import plan
from vrampilot.planner.search.explain import REASON, cache_source_text, why_lines
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.units import GIB

# Routed architectures testkit can write: llama.cpp loads each with the tensors and keys of the
# tiny fixture named (their loaders read the same ones).
ROUTED_FILES = {"nanbeige": "llama", "maincoder": "qwen3"}
SDIST = Path.home() / ".cache/vrampilot/engine/sdist/llama_cpp_python-0.3.36.tar.gz"


def test_every_llama_cpp_architecture_is_exact_or_routed() -> None:
    exact = [a for a in LLAMA_CPP_ARCHITECTURES if is_verified(a)]
    routed = [a for a in LLAMA_CPP_ARCHITECTURES if is_routed(a)]
    for a in LLAMA_CPP_ARCHITECTURES:
        assert is_verified(a) != is_routed(a), a
        assert loadable(a)
    assert sorted(exact) == sorted(VERIFIED)  # every verified architecture is one llama.cpp loads
    assert len(exact) + len(routed) == len(LLAMA_CPP_ARCHITECTURES) == len(set(LLAMA_CPP_ARCHITECTURES))
    assert len(exact) == 12 and len(routed) == 141
    print(f"exact ({len(exact)}): {' '.join(exact)}")
    print(f"counted by llama.cpp ({len(routed)}): {' '.join(routed)}")
    assert not loadable("foo-arch") and not is_routed("foo-arch") and not is_verified("foo-arch")


def test_verified_architectures_are_the_fixtures_held_against_llama_cpp() -> None:
    fixtures = {shape_of(a).arch for a in ARCHITECTURES}
    assert fixtures | {"deepseek4", "deepseek32"} == VERIFIED


def test_the_list_is_the_vendored_llama_cpps() -> None:
    if not SDIST.is_file():
        pytest.skip("the engine's source is not cached here")
    with tarfile.open(SDIST) as tar:
        member = tar.getmember("llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama-arch.cpp")
        f = tar.extractfile(member)
        assert f is not None
        source = f.read().decode()
    table = source.split("LLM_ARCH_NAMES = {", 1)[1].split("};", 1)[0]
    names = [n for n in re.findall(r'"([^"]*)"', table) if n != "(unknown)"]
    assert tuple(names) == LLAMA_CPP_ARCHITECTURES


@pytest.fixture(scope="module")
def routed_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("routed")
    return {arch: write_renamed(d / f"{arch}.gguf", base, arch) for arch, base in ROUTED_FILES.items()}


@pytest.mark.parametrize("arch", sorted(ROUTED_FILES))
def test_a_routed_plan_rests_on_llama_cpps_count(routed_files: dict[str, Path], arch: str) -> None:
    pytest.importorskip("llama_cpp")
    from vrampilot.planner.dry_run.log_lines import PRINT_RESOLUTION_BYTES
    from vrampilot.planner.dry_run.measure import measure_allocations

    spec = load_model_spec(routed_files[arch])
    assert spec.architecture == arch and is_routed(arch)
    p = plan(
        spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), alternatives=False
    )  # not exact: routed all the same
    assert p.kv_source == "llama.cpp" and p.compute_source == "llama.cpp" and p.fits
    m = measure_allocations(spec.path, p.settings)
    assert m.refused is None
    assert abs(p.memory.host.kv_bytes - m.kv_bytes) <= PRINT_RESOLUTION_BYTES * len(m.kv_lines)
    assert abs(p.memory.host.output_bytes - m.output_bytes) <= PRINT_RESOLUTION_BYTES
    text = cache_source_text(p)
    assert COUNTED_BY_LLAMA_CPP in text
    assert why_lines(p)[0].kind == REASON and why_lines(p)[0].text == text  # the window's Why list
    assert text in format_plan(p)
    d = plan_to_dict(p)
    assert d["kv_source"] == "llama.cpp" and COUNTED_BY_LLAMA_CPP in d["kv_source_text"]


def test_a_verified_plan_keeps_the_formula(tmp_path: Path) -> None:
    spec = load_model_spec(write_model(tmp_path / "llama.gguf", "llama"))
    p = plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()), alternatives=False)
    assert p.kv_source == "formula" and not p.graph.counted
    assert "verified exact" in cache_source_text(p)
    assert all(COUNTED_BY_LLAMA_CPP not in w.text for w in why_lines(p))


def test_the_count_replaces_the_formula_and_splits_by_layer(routed_files: dict[str, Path]) -> None:
    """What the planner does with a count (here one twice the formula's, to tell them apart): the
    cache is the count, shared among the layers as the formula shares it, on every side."""
    spec = load_model_spec(routed_files["nanbeige"])
    target = resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine())
    s = Settings(n_ctx=4096, n_gpu_layers=3)
    formula = memory_breakdown(spec, s, target, FORMULA)
    out = formula.host.output_bytes + 20000
    g = FORMULA.count(spec, s, 2 * formula.kv.total_bytes, out, tolerance=5000)
    mem = memory_breakdown(spec, s, target, g)
    assert mem.kv.total_bytes == 2 * formula.kv.total_bytes == sum(mem.kv.per_layer_bytes)
    assert mem.device.kv_bytes + mem.host.kv_bytes == mem.kv.total_bytes
    assert mem.device.kv_bytes == 2 * formula.device.kv_bytes
    assert mem.host.output_bytes == out
    # a count within the print's resolution keeps the formula's bytes (exact to the byte)
    g = FORMULA.count(spec, s, formula.kv.total_bytes + 4000, formula.host.output_bytes - 3000, tolerance=5000)
    assert memory_breakdown(spec, s, target, g).kv.total_bytes == formula.kv.total_bytes
    # other settings are ranked with the formula scaled by the last count
    g = FORMULA.count(spec, s, 2 * formula.kv.total_bytes, 0, tolerance=5000)
    other = s.with_(n_ctx=8192)
    assert g.kv_breakdown(spec, other).total_bytes == 2 * memory_breakdown(spec, other, target, FORMULA).kv.total_bytes


def test_an_architecture_llama_cpp_does_not_know_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = load_model_spec(write_renamed(tmp_path / "x.gguf", "llama", "foo-arch"))
    with pytest.raises(PlanError) as err:
        plan(spec, resolve_target(TargetRequest(cpu_only=True), cpu_machine()))
    assert str(err.value) == "llama.cpp cannot load this model: unknown model architecture: 'foo-arch'"
