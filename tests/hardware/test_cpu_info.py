"""CPU and RAM detection on this machine, and feature parsing from both sources."""

from __future__ import annotations

import platform
from pathlib import Path

from vrampilot.hardware import detect_cpu, detect_ram
from vrampilot.hardware.cpu import features_from_cpuinfo, features_from_system_info


def test_this_machine_is_sane() -> None:
    cpu = detect_cpu()
    assert cpu.model_name
    assert cpu.architecture == platform.machine()
    assert 1 <= cpu.physical_cores <= cpu.logical_cores
    cpuinfo = Path("/proc/cpuinfo")
    if cpu.architecture in ("x86_64", "AMD64") and cpuinfo.exists():
        flags = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split()
        assert ("avx2" in cpu.features) == ("avx2" in flags)
        assert ("avx512f" in cpu.features) == ("avx512f" in flags)


def test_ram_is_sane() -> None:
    total, available = detect_ram()
    assert total > 256 * 1024**2
    assert 0 < available <= total


def test_x86_flags() -> None:
    text = (
        "processor\t: 0\nmodel name\t: Test CPU\n"
        "flags\t\t: fpu pni ssse3 avx avx2 fma f16c avx512f avx512_vnni amx_tile amx_int8\n"
    )
    expected = ("sse3", "ssse3", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "amx", "amx_int8")
    assert features_from_cpuinfo(text) == expected


def test_arm_features() -> None:
    text = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes asimdhp asimddp sve sve2 i8mm\n"
    assert features_from_cpuinfo(text) == ("neon", "dotprod", "fp16", "i8mm", "sve", "sve2")


def test_llama_system_info_fallback(tmp_path: Path) -> None:
    info = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 0 | LLAMAFILE = 1 |"
    assert features_from_system_info(info) == ("sse3", "ssse3", "avx", "avx2", "fma", "f16c")
    assert features_from_system_info("CPU : NEON = 1 | ARM_FMA = 1 | DOTPROD = 1 | MATMUL_INT8 = 1 |") == (
        "neon",
        "dotprod",
        "i8mm",
    )
    cpu = detect_cpu(system_info=info, cpuinfo_path=tmp_path / "missing")  # Windows and macOS path
    assert cpu.features == ("sse3", "ssse3", "avx", "avx2", "fma", "f16c")
