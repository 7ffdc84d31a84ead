"""What the machine has: GPUs via NVML, CPU and RAM via psutil, the llama.cpp backend, GPU profiles.

Qt-free. `detect_machine()` is the one entry point for detection; `find_profile` +
`profile_as_gpu` plan for a GPU the user does not have.
"""

from vrampilot.hardware.cpu import detect_cpu, detect_ram
from vrampilot.hardware.detect import detect_machine
from vrampilot.hardware.llama_backend import detect_llama_backend
from vrampilot.hardware.nvml import (
    NvmlDetection,
    detect_nvidia_gpus,
    load_pynvml,
    nvml_session,
    peak_bandwidth_gbps,
    read_gpu_sample,
)
from vrampilot.hardware.profiles import (
    GpuProfile,
    UnknownGpuProfileError,
    find_profile,
    load_profiles,
    match_detected,
    profile_as_gpu,
)
from vrampilot.hardware.report import format_machine, machine_to_dict, machine_warnings
from vrampilot.hardware.types import CpuInfo, GpuInfo, GpuSample, LlamaBackendInfo, LlamaDevice, Machine

__all__ = [
    "CpuInfo",
    "GpuInfo",
    "GpuProfile",
    "GpuSample",
    "LlamaBackendInfo",
    "LlamaDevice",
    "Machine",
    "NvmlDetection",
    "UnknownGpuProfileError",
    "detect_cpu",
    "detect_llama_backend",
    "detect_machine",
    "detect_nvidia_gpus",
    "detect_ram",
    "find_profile",
    "format_machine",
    "load_profiles",
    "load_pynvml",
    "machine_to_dict",
    "machine_warnings",
    "match_detected",
    "nvml_session",
    "peak_bandwidth_gbps",
    "profile_as_gpu",
    "read_gpu_sample",
]
