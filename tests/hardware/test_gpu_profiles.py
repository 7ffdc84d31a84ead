"""GPU profiles: the data file's integrity and how users' names find entries."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testkit.fake_nvml import GIB, MIB
from vrampilot.hardware import (
    GpuProfile,
    UnknownGpuProfileError,
    find_profile,
    load_profiles,
    match_detected,
    profile_as_gpu,
)
from vrampilot.hardware.profiles import PROFILES_FILE
from vrampilot.paths import profiles_dir

PROFILES = load_profiles()


def test_at_least_45_profiles_with_unique_names() -> None:
    assert len(PROFILES) >= 45
    names = [p.name for p in PROFILES]
    assert len(set(names)) == len(names)


def test_every_entry_is_complete_and_plausible() -> None:
    for p in PROFILES:
        assert p.vendor in {"NVIDIA", "AMD", "Intel", "Apple"}, p.name
        assert p.memory_bytes > 0 and p.memory_bytes % GIB == 0, p.name
        assert 50 <= p.bandwidth_gbps <= 6000, p.name
        assert p.fp16_tflops is not None and 1 <= p.fp16_tflops <= 2000, p.name
        assert p.unified_memory == (p.vendor == "Apple"), p.name


def test_data_file_has_the_documented_fields() -> None:
    data = json.loads((profiles_dir() / PROFILES_FILE).read_text(encoding="utf-8"))
    for entry in data["gpus"]:
        assert {"name", "vendor", "memory_bytes", "bandwidth_gbps", "fp16_tflops", "aliases", "unified_memory"} <= set(
            entry
        )


@pytest.mark.parametrize(
    ("name", "memory_gib", "bandwidth_gbps"),
    [
        ("RTX 4060", 8, 272),
        ("RTX 3060 12GB", 12, 360),
        ("RTX 3080 10GB", 10, 760),
        ("RTX 3080 12GB", 12, 912),
        ("RTX 4090", 24, 1008),
        ("RTX 5090", 32, 1792),
        ("GTX 1080 Ti", 11, 484),
        ("H100 SXM", 80, 3350),
        ("H200", 141, 4800),
        ("Instinct MI300X", 192, 5300),
        ("Apple M2 Ultra 192GB", 192, 800),
    ],
)
def test_spec_sheet_values(name: str, memory_gib: int, bandwidth_gbps: float) -> None:
    p = find_profile(name)
    assert p.memory_bytes == memory_gib * GIB
    assert p.bandwidth_gbps == bandwidth_gbps


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("4090", "RTX 4090"),
        ("rtx4090", "RTX 4090"),
        ("RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("  nvidia   geforce rtx 4090 ", "RTX 4090"),
        ("4090 laptop", "RTX 4090 Laptop 16GB"),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "RTX 4060 Laptop 8GB"),
        ("4060 ti 16gb", "RTX 4060 Ti 16GB"),
        ("4070 ti super", "RTX 4070 Ti Super"),
        ("4070 ti", "RTX 4070 Ti"),
        ("a10", "A10"),
        ("a100 80gb", "A100 80GB"),
        ("Tesla T4", "Tesla T4"),
        ("h100 sxm", "H100 SXM"),
        ("7900xtx", "RX 7900 XTX"),
        ("Arc A770", "Arc A770 16GB"),
        ("m2 ultra", "Apple M2 Ultra 192GB"),
        ("M1", "Apple M1 16GB"),
    ],
)
def test_find_profile_fuzzy(query: str, expected: str) -> None:
    assert find_profile(query).name == expected


@given(p=st.sampled_from(PROFILES), data=st.data())
def test_any_name_found_whatever_case_and_spacing(p: GpuProfile, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(p.names))
    mangled = "".join(
        (c.upper() if data.draw(st.booleans()) else c.lower()) + (" " if data.draw(st.booleans()) else "") for c in name
    )
    assert find_profile(mangled) == p


@pytest.mark.parametrize(
    ("query", "listed"),
    [
        ("4060 ti", ["RTX 4060 Ti 8GB", "RTX 4060 Ti 16GB"]),
        ("h100", ["H100 PCIe", "H100 SXM"]),
        ("7900", ["RX 7900 XT", "RX 7900 XTX"]),
    ],
)
def test_ambiguous_name_lists_the_candidates(query: str, listed: list[str]) -> None:
    with pytest.raises(UnknownGpuProfileError) as err:
        find_profile(query)
    for name in listed:
        assert name in str(err.value)


def test_unknown_name_lists_close_names() -> None:
    with pytest.raises(UnknownGpuProfileError) as err:
        find_profile("RTX 4091")
    message = str(err.value)
    assert "RTX 4091" in message and "RTX 4090" in message
    assert message.count(",") <= 4  # at most five names
    assert isinstance(err.value, ValueError)


def test_nonsense_and_empty_names() -> None:
    with pytest.raises(UnknownGpuProfileError):
        find_profile("banana")
    with pytest.raises(UnknownGpuProfileError):
        find_profile("NVIDIA GeForce")


@pytest.mark.parametrize(
    ("nvml_name", "memory_bytes", "expected"),
    [
        ("NVIDIA GeForce RTX 4090", 24564 * MIB, "RTX 4090"),
        ("NVIDIA GeForce RTX 3080", 10240 * MIB, "RTX 3080 10GB"),
        ("NVIDIA GeForce RTX 3080", 12288 * MIB, "RTX 3080 12GB"),
        ("NVIDIA GeForce RTX 4060 Ti", 16380 * MIB, "RTX 4060 Ti 16GB"),
        ("Tesla T4", 15360 * MIB, "Tesla T4"),
        ("NVIDIA A100-SXM4-80GB", 81920 * MIB, "A100 80GB"),
        ("NVIDIA H100 80GB HBM3", 81559 * MIB, "H100 SXM"),
        ("NVIDIA H100 PCIe", 81559 * MIB, "H100 PCIe"),
        ("NVIDIA H200", 143771 * MIB, "H200"),
        ("NVIDIA RTX 6000 Ada Generation", 49140 * MIB, "RTX 6000 Ada"),
    ],
)
def test_match_detected(nvml_name: str, memory_bytes: int, expected: str) -> None:
    p = match_detected(nvml_name, memory_bytes)
    assert p is not None and p.name == expected


def test_match_detected_refuses_to_guess() -> None:
    assert match_detected("NVIDIA GeForce RTX 4060 Ti") is None  # 8 or 16 GB: unknown
    assert match_detected("NVIDIA GeForce RTX 3060", 8 * GIB) is None  # the 8 GB model has no profile
    assert match_detected("NVIDIA Mystery X1", 8 * GIB) is None
    assert match_detected("") is None


def test_profile_as_gpu() -> None:
    gpu = profile_as_gpu(find_profile("4060 ti 16gb"), index=1)
    assert gpu.index == 1
    assert gpu.name == "RTX 4060 Ti 16GB"
    assert gpu.memory_total_bytes == 16 * GIB
    assert gpu.peak_bandwidth_gbps == 288
    assert gpu.bandwidth_source == "profile"
    assert gpu.memory_free_bytes is None and gpu.uuid is None
