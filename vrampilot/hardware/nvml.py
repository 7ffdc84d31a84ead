"""The NVML boundary: every call into NVIDIA's management library goes through here.

Functions take an `nvml` object with pynvml's module API (the `pynvml` module of the
nvidia-ml-py package, or the test double in testkit/fake_nvml.py). A machine without the
package, the library or the driver is normal, not an error: detection then reports no GPU and a
one-line reason. A query a GPU does not support (NVMLError "Not Supported") leaves that one field
None and reads the rest.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from vrampilot.hardware.profiles import match_detected
from vrampilot.hardware.types import GpuInfo, GpuSample

NvmlApi = Any  # pynvml's module API; see testkit/fake_nvml.py for what is used
T = TypeVar("T")

CPU_FALLBACK = "no NVIDIA GPU detected, planning for the CPU"

# pynvml error codes we explain in words (nvml.h NVML_ERROR_*).
_ERROR_REASONS = {
    4: "no permission to talk to the NVIDIA driver",
    9: "NVIDIA driver not loaded",
    12: "{lib}",
    18: "NVIDIA driver and library versions differ: reboot after the driver update",
}


@dataclass(frozen=True)
class NvmlDetection:
    gpus: tuple[GpuInfo, ...]
    status: str
    available: bool
    driver_version: str | None = None


def load_pynvml() -> NvmlApi:
    """The real binding. Importing it does not load the driver library; nvmlInit does."""
    import pynvml

    return pynvml


def _library_name(platform: str = sys.platform) -> str:
    """What is missing, and where pynvml looked: on Windows the two places the NVIDIA driver puts
    nvml.dll (System32 for DCH drivers, NVSMI for older ones); elsewhere the loader's search path."""
    if platform == "win32":
        return r"nvml.dll not found in %WINDIR%\System32 or %ProgramFiles%\NVIDIA Corporation\NVSMI"
    return "libnvidia-ml.so.1 not found"


def _text(value: object) -> str:
    """pynvml returns str in recent releases and bytes in older ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _error_reason(nvml: NvmlApi, exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    if isinstance(exc, getattr(nvml, "NVMLError", ())) and code in _ERROR_REASONS:
        return _ERROR_REASONS[code].format(lib=_library_name())
    try:
        text = str(exc).strip()
    except Exception:  # pynvml's __str__ calls into the library, which may be the problem
        text = ""
    return text or f"{type(exc).__name__} {code if code is not None else ''}".strip()


def _query(nvml: NvmlApi, fn: Callable[..., T], *args: object) -> T | None:
    """One NVML call; None if the GPU or driver does not support it."""
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def cuda_version_text(cuda_driver_version: int) -> str:
    """NVML's 12040 -> "12.4" (major * 1000 + minor * 10)."""
    return f"{cuda_driver_version // 1000}.{(cuda_driver_version % 1000) // 10}"


def peak_bandwidth_gbps(bus_width_bits: int, memory_clock_mhz: int) -> float:
    """Peak memory bandwidth in GB/s from what NVML reports.

    NVML's max memory clock already includes the GDDR data-rate multipliers except the final
    double data rate, hence the factor 2: RTX 4090, 384 bit at 10501 MHz -> 1008 GB/s;
    H100 SXM, 5120 bit at 2619 MHz -> 3352 GB/s.
    """
    return bus_width_bits / 8 * memory_clock_mhz * 2 * 1e6 / 1e9


@contextlib.contextmanager
def nvml_session(nvml: NvmlApi) -> Iterator[NvmlApi]:
    """nvmlInit ... nvmlShutdown. The meters hold one open while they sample."""
    nvml.nvmlInit()
    try:
        yield nvml
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _positive(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


def _read_gpu(nvml: NvmlApi, index: int, driver: str | None, cuda: str | None) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name_raw = _query(nvml, nvml.nvmlDeviceGetName, handle)
    name = _text(name_raw) if name_raw is not None else f"NVIDIA GPU {index}"
    uuid_raw = _query(nvml, nvml.nvmlDeviceGetUUID, handle)
    mem = _query(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    bus = _positive(_query(nvml, nvml.nvmlDeviceGetMemoryBusWidth, handle))
    clock = _positive(_query(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM))
    gen = _query(nvml, nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    if gen is None:
        gen = _query(nvml, nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle)
    width = _query(nvml, nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
    if width is None:
        width = _query(nvml, nvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
    display = _query(nvml, nvml.nvmlDeviceGetDisplayActive, handle)
    pci = _query(nvml, nvml.nvmlDeviceGetPciInfo, handle)
    bus_id = getattr(pci, "busId", None) if pci is not None else None
    total = int(mem.total) if mem is not None else 0
    gpu = GpuInfo(
        index=index,
        name=name,
        uuid=_text(uuid_raw) if uuid_raw is not None else None,
        vendor="NVIDIA",
        memory_total_bytes=total,
        memory_free_bytes=int(mem.free) if mem is not None else None,
        memory_used_bytes=int(mem.used) if mem is not None else None,
        driver_version=driver,
        cuda_version=cuda,
        memory_bus_width_bits=bus,
        memory_clock_max_mhz=clock,
        peak_bandwidth_gbps=peak_bandwidth_gbps(bus, clock) if bus and clock else None,
        bandwidth_source="nvml" if bus and clock else "unknown",
        pcie_generation=_positive(gen),
        pcie_width=_positive(width),
        display_active=None if display is None else bool(display),
        fp16_tflops=None,
        pci_bus_id=(_text(bus_id) or None) if bus_id is not None else None,
    )
    return _fill_from_profile(gpu)


def _fill_from_profile(gpu: GpuInfo) -> GpuInfo:
    """NVML has no FLOPS figure, and some GPUs hide bus width or clocks: the profile has both."""
    profile = match_detected(gpu.name, gpu.memory_total_bytes or None)
    if profile is None:
        return gpu
    if gpu.peak_bandwidth_gbps is None:
        gpu = replace(gpu, peak_bandwidth_gbps=profile.bandwidth_gbps, bandwidth_source="profile")
    return replace(gpu, fp16_tflops=profile.fp16_tflops)


def _unavailable(reason: str) -> NvmlDetection:
    return NvmlDetection(gpus=(), status=f"NVML not available ({reason}): {CPU_FALLBACK}", available=False)


def detect_nvidia_gpus(nvml: NvmlApi | None = None, *, loader: Callable[[], NvmlApi] = load_pynvml) -> NvmlDetection:
    """All NVIDIA GPUs NVML sees. Never raises: a missing package, library or driver is a status."""
    if nvml is None:
        try:
            nvml = loader()
        except ImportError:
            return _unavailable("the nvidia-ml-py package is not installed")
        except Exception as exc:  # a broken install must not stop the app from starting
            return _unavailable(f"nvidia-ml-py failed to load: {exc}")
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return _unavailable(_error_reason(nvml, exc))
    try:
        return _detect_initialized(nvml)
    except Exception as exc:
        return NvmlDetection(
            gpus=(), status=f"NVML failed ({_error_reason(nvml, exc)}): {CPU_FALLBACK}", available=False
        )
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _detect_initialized(nvml: NvmlApi) -> NvmlDetection:
    driver_raw = _query(nvml, nvml.nvmlSystemGetDriverVersion)
    driver = _text(driver_raw) if driver_raw is not None else None
    cuda_raw = _query(nvml, nvml.nvmlSystemGetCudaDriverVersion)
    cuda = cuda_version_text(int(cuda_raw)) if cuda_raw else None
    count = int(nvml.nvmlDeviceGetCount())
    gpus: list[GpuInfo] = []
    skipped: list[str] = []
    for index in range(count):
        try:
            gpus.append(_read_gpu(nvml, index, driver, cuda))
        except nvml.NVMLError as exc:  # e.g. "GPU is lost": report the rest
            skipped.append(f"GPU {index} unreadable: {_error_reason(nvml, exc)}")
    status = f"NVML: driver {driver or 'unknown'}" + (f", CUDA {cuda}" if cuda else "")
    if gpus:
        status += f", {len(gpus)} GPU" + ("s" if len(gpus) > 1 else "")
    else:
        status += ", no GPU found: planning for the CPU"
    if skipped:
        status += " (" + "; ".join(skipped) + ")"
    return NvmlDetection(gpus=tuple(gpus), status=status, available=True, driver_version=driver)


def read_gpu_sample(nvml: NvmlApi, index: int, pid: int | None = None) -> GpuSample:
    """One live reading of GPU `index` for the meters. NVML must be initialized (`nvml_session`).

    Cheap enough to call a few times a second. Raises nvml.NVMLError only if the GPU itself
    cannot be reached; unsupported readings are None.
    """
    pid = os.getpid() if pid is None else pid
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = _query(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    util = _query(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    power_mw = _query(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
    processes = _query(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, handle)
    process_bytes: int | None = None
    for proc in processes or ():
        used = getattr(proc, "usedGpuMemory", None)
        if getattr(proc, "pid", None) == pid and used is not None:
            process_bytes = (process_bytes or 0) + int(used)
    return GpuSample(
        index=index,
        memory_total_bytes=int(mem.total) if mem is not None else None,
        memory_used_bytes=int(mem.used) if mem is not None else None,
        memory_free_bytes=int(mem.free) if mem is not None else None,
        utilization_gpu_pct=int(util.gpu) if util is not None else None,
        utilization_memory_pct=int(util.memory) if util is not None else None,
        pcie_rx_kb_per_s=_query(nvml, nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES),
        pcie_tx_kb_per_s=_query(nvml, nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES),
        clock_graphics_mhz=_query(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_GRAPHICS),
        clock_memory_mhz=_query(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        temperature_c=_query(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        power_w=power_mw / 1000.0 if power_mw is not None else None,
        process_memory_used_bytes=process_bytes,
    )
