"""CPU and RAM. Instruction-set features come from /proc/cpuinfo on Linux and, elsewhere, from
llama.cpp's own system-info line ("AVX2 = 1 | ..."), so no extra dependency is needed.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys
from pathlib import Path

import psutil

from vrampilot.hardware.types import CpuInfo

# The features llama.cpp chooses kernels by, in the order we print them.
FEATURE_ORDER = (
    "sse3",
    "ssse3",
    "avx",
    "avx2",
    "avx_vnni",
    "fma",
    "f16c",
    "bmi2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "amx",
    "amx_int8",
    "amx_bf16",
    "neon",
    "dotprod",
    "fp16",
    "i8mm",
    "sve",
    "sve2",
    "sme",
)

# /proc/cpuinfo flag (x86 "flags", Arm "Features") -> our name.
_LINUX_FLAGS = {
    "pni": "sse3",
    "ssse3": "ssse3",
    "avx": "avx",
    "avx2": "avx2",
    "avx_vnni": "avx_vnni",
    "fma": "fma",
    "f16c": "f16c",
    "bmi2": "bmi2",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512vl": "avx512vl",
    "avx512vbmi": "avx512_vbmi",
    "avx512_vnni": "avx512_vnni",
    "avx512_bf16": "avx512_bf16",
    "amx_tile": "amx",
    "amx_int8": "amx_int8",
    "amx_bf16": "amx_bf16",
    "asimd": "neon",
    "asimddp": "dotprod",
    "asimdhp": "fp16",
    "i8mm": "i8mm",
    "sve": "sve",
    "sve2": "sve2",
    "sme": "sme",
}

# llama.cpp system-info key -> our names.
_LLAMA_FLAGS = {
    "SSE3": ("sse3",),
    "SSSE3": ("ssse3",),
    "AVX": ("avx",),
    "AVX2": ("avx2",),
    "AVX_VNNI": ("avx_vnni",),
    "FMA": ("fma",),
    "F16C": ("f16c",),
    "BMI2": ("bmi2",),
    "AVX512": ("avx512f",),
    "AVX512_VBMI": ("avx512_vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_INT8": ("amx", "amx_int8"),
    "NEON": ("neon",),
    "DOTPROD": ("dotprod",),
    "FP16_VA": ("fp16",),
    "MATMUL_INT8": ("i8mm",),
    "SVE": ("sve",),
    "SME": ("sme",),
}
_LLAMA_FLAG_RE = re.compile(r"\b([A-Z0-9_]+)\s*=\s*1\b")


def _ordered(features: set[str]) -> tuple[str, ...]:
    return tuple(f for f in FEATURE_ORDER if f in features)


def features_from_cpuinfo(text: str) -> tuple[str, ...]:
    """Features from the first processor block of /proc/cpuinfo (x86 'flags' or Arm 'Features')."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return _ordered({_LINUX_FLAGS[f] for f in value.split() if f in _LINUX_FLAGS})
    return ()


def features_from_system_info(system_info: str) -> tuple[str, ...]:
    """Features from llama.cpp's `llama_print_system_info()` line, e.g. 'CPU : AVX2 = 1 | FMA = 1'."""
    found: set[str] = set()
    for key in _LLAMA_FLAG_RE.findall(system_info):
        found.update(_LLAMA_FLAGS.get(key, ()))
    return _ordered(found)


def _cpuinfo_model(text: str) -> str | None:
    for key in ("model name", "Model", "Hardware", "cpu model"):
        for line in text.splitlines():
            k, _, value = line.partition(":")
            if k.strip() == key and value.strip():
                return value.strip()
    return None


def _windows_model() -> str | None:
    if sys.platform != "win32":
        return None
    try:
        import winreg

        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"HARDWARE\DESCRIPTION\System\CentralProcessor\0") as key:
            return str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip() or None
    except OSError:
        return None


def _mac_model() -> str | None:
    if sys.platform != "darwin":
        return None
    import subprocess

    try:
        out = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=2, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def detect_cpu(system_info: str | None = None, cpuinfo_path: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    """The host CPU. `system_info` (llama.cpp's line) supplies features where /proc/cpuinfo is absent."""
    cpuinfo = ""
    with contextlib.suppress(OSError):
        cpuinfo = cpuinfo_path.read_text(encoding="utf-8", errors="replace")
    features = features_from_cpuinfo(cpuinfo) if cpuinfo else ()
    if not features and system_info:
        features = features_from_system_info(system_info)
    model = (
        (_cpuinfo_model(cpuinfo) if cpuinfo else None)
        or _windows_model()
        or _mac_model()
        or platform.processor()
        or platform.machine()
        or "unknown CPU"
    )
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    return CpuInfo(
        model_name=model,
        architecture=platform.machine() or "unknown",
        physical_cores=int(physical),
        logical_cores=int(logical),
        features=features,
    )


def detect_ram() -> tuple[int, int]:
    """(total, available) system memory in bytes."""
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)
