"""What the machine has: GPUs via NVML, CPU and RAM via psutil, the llama.cpp backend, GPU profiles.

Qt-free. `detect_machine()` is the one entry point for detection; `find_profile` +
`profile_as_gpu` plan for a GPU the user does not have.

Its API is `__all__`, each name imported on first use (vrampilot/lazy_api.py); its modules are
private to it (docs/development.md, "Stated APIs").
"""

from __future__ import annotations

from vrampilot.lazy_api import lazy_api

TYPE_CHECKING = False  # typing's, without importing typing (vrampilot/lazy_api.py)
if TYPE_CHECKING:
    from vrampilot.hardware.cards import (
        GPU_BACKEND_CHOICES,
        GpuBackendError,
        card_devices,
        choose_devices,
        group_cards,
        parse_gpu_backend,
    )
    from vrampilot.hardware.cpu import detect_cpu, detect_ram
    from vrampilot.hardware.detect import detect_machine
    from vrampilot.hardware.dxgi import DXGI_ADAPTER_FLAG_SOFTWARE, AdapterDesc1, Luid, RawAdapter, VideoMemoryInfo
    from vrampilot.hardware.free_memory import OS_SOURCES
    from vrampilot.hardware.llama_backend import detect_llama_backend
    from vrampilot.hardware.nvml import (
        CPU_FALLBACK,
        NvmlApi,
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
    from vrampilot.hardware.report import (
        NO_CUDA_NOTE,
        WINDOWS_NO_CUDA,
        format_machine,
        machine_to_dict,
        machine_warnings,
    )
    from vrampilot.hardware.rpc import RpcDeviceMemory, RpcHost, RpcHostError, parse_hosts, query_host, query_hosts
    from vrampilot.hardware.types import CpuInfo, GpuInfo, GpuSample, LlamaBackendInfo, LlamaDevice, Machine

__all__ = [
    "CPU_FALLBACK",
    "DXGI_ADAPTER_FLAG_SOFTWARE",
    "GPU_BACKEND_CHOICES",
    "NO_CUDA_NOTE",
    "OS_SOURCES",
    "WINDOWS_NO_CUDA",
    "AdapterDesc1",
    "CpuInfo",
    "GpuBackendError",
    "GpuInfo",
    "GpuProfile",
    "GpuSample",
    "LlamaBackendInfo",
    "LlamaDevice",
    "Luid",
    "Machine",
    "NvmlApi",
    "NvmlDetection",
    "RawAdapter",
    "RpcDeviceMemory",
    "RpcHost",
    "RpcHostError",
    "UnknownGpuProfileError",
    "VideoMemoryInfo",
    "card_devices",
    "choose_devices",
    "detect_cpu",
    "detect_llama_backend",
    "detect_machine",
    "detect_nvidia_gpus",
    "detect_ram",
    "find_profile",
    "format_machine",
    "group_cards",
    "load_profiles",
    "load_pynvml",
    "machine_to_dict",
    "machine_warnings",
    "match_detected",
    "nvml_session",
    "parse_gpu_backend",
    "parse_hosts",
    "peak_bandwidth_gbps",
    "profile_as_gpu",
    "query_host",
    "query_hosts",
    "read_gpu_sample",
]

# Each module and the names of the API it holds ("api=name" where the API renames one).
_HOLDERS = {
    "cards": (
        "GPU_BACKEND_CHOICES",
        "GpuBackendError",
        "card_devices",
        "choose_devices",
        "group_cards",
        "parse_gpu_backend",
    ),
    "cpu": ("detect_cpu", "detect_ram"),
    "detect": ("detect_machine",),
    "dxgi": ("DXGI_ADAPTER_FLAG_SOFTWARE", "AdapterDesc1", "Luid", "RawAdapter", "VideoMemoryInfo"),
    "free_memory": ("OS_SOURCES",),
    "llama_backend": ("detect_llama_backend",),
    "nvml": (
        "CPU_FALLBACK",
        "NvmlApi",
        "NvmlDetection",
        "detect_nvidia_gpus",
        "load_pynvml",
        "nvml_session",
        "peak_bandwidth_gbps",
        "read_gpu_sample",
    ),
    "profiles": (
        "GpuProfile",
        "UnknownGpuProfileError",
        "find_profile",
        "load_profiles",
        "match_detected",
        "profile_as_gpu",
    ),
    "report": ("NO_CUDA_NOTE", "WINDOWS_NO_CUDA", "format_machine", "machine_to_dict", "machine_warnings"),
    "rpc": ("RpcDeviceMemory", "RpcHost", "RpcHostError", "parse_hosts", "query_host", "query_hosts"),
    "types": ("CpuInfo", "GpuInfo", "GpuSample", "LlamaBackendInfo", "LlamaDevice", "Machine"),
}

if not TYPE_CHECKING:  # hidden from the type checker, which reads the imports above
    __getattr__, __dir__ = lazy_api(__name__, _HOLDERS)
