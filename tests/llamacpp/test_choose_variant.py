"""Choosing the CPU variant from what really executes, on CPUs this machine is not.

The variant table is llama.cpp's own (ggml/src/CMakeLists.txt, as the recipe reads it into the
build's manifest); the probes describe CPUs whose CPUID and OS disagree, as VMs do.
"""

from __future__ import annotations

import sys
from collections.abc import Set as AbstractSet
from pathlib import Path

import pytest

from vrampilot.llamacpp.backends import choose_variant, describe_features, variant_score
from vrampilot.llamacpp.cpu_probe import FEATURES, CpuProbe, FeatureResult

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging" / "engine"))
import build as recipe

CMAKE_EXCERPT = """
if (GGML_CPU_ALL_VARIANTS)
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sse42              SSE42)
        ggml_add_cpu_backend_variant(sandybridge        SSE42 AVX)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(ivybridge      SSE42 AVX F16C)
            ggml_add_cpu_backend_variant(piledriver     SSE42 AVX F16C FMA)
        endif()
        ggml_add_cpu_backend_variant(haswell            SSE42 AVX F16C FMA AVX2 BMI2)
        ggml_add_cpu_backend_variant(skylakex           SSE42 AVX F16C FMA AVX2 BMI2 AVX512)
        ggml_add_cpu_backend_variant(cannonlake         SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI)
        ggml_add_cpu_backend_variant(cascadelake        SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VNNI)
        ggml_add_cpu_backend_variant(icelake            SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(cooperlake     SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VNNI AVX512_BF16)
            ggml_add_cpu_backend_variant(zen4           SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16)
        endif()
        ggml_add_cpu_backend_variant(alderlake          SSE42 AVX F16C FMA AVX2 BMI2 AVX_VNNI)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(sapphirerapids SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8)
        endif()
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
        ggml_add_cpu_backend_variant(armv8.0_1)
    endif()
endif()
"""
VARIANTS = recipe.x86_variants(CMAKE_EXCERPT)


def cpu(advertised: set[str], runs: set[str], os_refused: AbstractSet[str] = frozenset()) -> CpuProbe:
    results = []
    for f in FEATURES:
        if f in runs:
            results.append(FeatureResult(f, True, True, True, ""))
        elif f in os_refused:
            results.append(
                FeatureResult(f, True, False, False, "advertised but not enabled by the OS (faults when run (SIGILL))")
            )
        elif f in advertised:
            results.append(FeatureResult(f, True, True, False, "advertised but faults when run (SIGILL)"))
        else:
            results.append(FeatureResult(f, False, False, False, "not in this CPU"))
    return CpuProbe("test", "executed", tuple(results))


HASWELL = {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"}
AVX512_ALL = HASWELL | {"AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"}
AMX = {"AMX_TILE", "AMX_INT8"}


def test_the_recipe_reads_every_x86_variant_and_only_those() -> None:
    assert len(VARIANTS) == 14
    assert VARIANTS["x64"] == []
    assert VARIANTS["sapphirerapids"][-2:] == ["AMX_TILE", "AMX_INT8"]
    assert "armv8.0_1" not in VARIANTS


def test_an_honest_cpu_gets_what_llama_cpp_would_pick() -> None:
    assert choose_variant(VARIANTS, cpu(AVX512_ALL | AMX, AVX512_ALL | AMX)).name == "sapphirerapids"  # type: ignore[union-attr]  # each of these CPUs gets a variant
    assert choose_variant(VARIANTS, cpu(AVX512_ALL, AVX512_ALL)).name == "zen4"  # type: ignore[union-attr]  # each of these CPUs gets a variant
    assert choose_variant(VARIANTS, cpu(HASWELL, HASWELL)).name == "haswell"  # type: ignore[union-attr]  # each of these CPUs gets a variant
    assert choose_variant(VARIANTS, cpu({"SSE42"}, {"SSE42"})).name == "sse42"  # type: ignore[union-attr]  # each of these CPUs gets a variant
    assert choose_variant(VARIANTS, cpu(set(), set())).name == "x64"  # type: ignore[union-attr]  # each of these CPUs gets a variant
    assert choose_variant(VARIANTS, cpu(HASWELL | {"AVX_VNNI"}, HASWELL | {"AVX_VNNI"})).name == "alderlake"  # type: ignore[union-attr]  # each of these CPUs gets a variant


def test_amx_advertised_but_not_enabled_by_the_os_is_skipped_with_the_reason() -> None:
    # The VM this project's CI runs on: CPUID lists AMX, the tile state is not usable.
    choice = choose_variant(VARIANTS, cpu(AVX512_ALL | AMX, AVX512_ALL, os_refused=AMX))
    assert choice is not None
    assert choice.name == "zen4"
    assert "AMX_TILE" not in choice.features
    assert [s.name for s in choice.skipped] == ["sapphirerapids"]
    assert "AMX_TILE advertised but not enabled by the OS" in choice.skipped[0].reason


def test_avx512_without_the_os_zmm_state_falls_back_to_avx2() -> None:
    choice = choose_variant(
        VARIANTS, cpu(AVX512_ALL, HASWELL, os_refused={"AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"})
    )
    assert choice is not None and choice.name == "haswell"
    assert all("AVX512" in s.reason for s in choice.skipped)


def test_avx_advertised_but_disabled_by_a_vm_gets_sse42() -> None:
    # llama.cpp #28328: a VM with the AVX state disabled got the AVX2 variant and SIGILL.
    choice = choose_variant(VARIANTS, cpu(HASWELL, {"SSE42"}, os_refused=HASWELL - {"SSE42", "BMI2"}))
    assert choice is not None and choice.name == "sse42"


def test_scores_are_llama_cpps_and_names_are_for_people() -> None:
    assert variant_score([]) == 1
    assert (
        variant_score(VARIANTS["sapphirerapids"]) > variant_score(VARIANTS["zen4"]) > variant_score(VARIANTS["icelake"])
    )
    assert describe_features(tuple(VARIANTS["zen4"])) == "AVX-512 + VBMI + VNNI + BF16"
    assert describe_features(tuple(VARIANTS["haswell"])) == "AVX2"
    assert describe_features(()) == "baseline x86-64, SSE2"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_is_chosen_on_exactly_its_own_features(name: str) -> None:
    features = set(VARIANTS[name])
    choice = choose_variant(VARIANTS, cpu(features, features))
    assert choice is not None and choice.name == name
    assert choice.skipped == ()  # nothing better was advertised
