"""The one test double at the NVML boundary: a stand-in for the `pynvml` module.

`FakeNvml` exposes the pynvml functions and constants the app uses, with pynvml's return shapes
(memory info with .total/.free/.used, utilization with .gpu/.memory, process objects with .pid and
.usedGpuMemory, str names) and its error hierarchy (`NVMLError(3)` is an `NVMLError_NotSupported`).

Devices are `FakeGpu` specs (static facts) whose live readings are a script: a sequence of
`FakeReading`s. The current reading is chosen either by `tick()` (step mode) or, when a clock is
given, by `clock() // gpu.step_s` (time mode, e.g. with `FakeClock`). The last reading holds once
the script runs out. `ramp` and `hold` build scripts, so a meters test can write a session:

    load = ramp(idle, loaded, steps=5)          # VRAM rising while weights upload over PCIe
    decode = hold(decoding, steps=10)           # high memory-controller load, little PCIe
    spill = hold(spilling, steps=5)             # VRAM full, PCIe busy, GPU mostly idle
    nvml = FakeNvml([FakeGpu(readings=load + decode + spill)])

Failures: `init_error=NVML_ERROR_LIBRARY_NOT_FOUND` (no driver), `FakeGpu(unsupported={...})`
(those device functions raise NotSupported), `errors={name: code}` for any other code.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

GIB = 1024**3
MIB = 1024**2

# Constants, with pynvml's values.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml's: constructing NVMLError(code) yields the subclass for that code."""

    _value_class: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._value_class.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _error_class(code_name: str, code: int) -> type[NVMLError]:
    name = "NVMLError_" + string.capwords(code_name, "_").replace("_", "")
    cls = type(name, (NVMLError,), {"__new__": lambda c, *a: NVMLError.__new__(c, code)})
    NVMLError._value_class[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("UNINITIALIZED", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NO_PERMISSION", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _error_class("NOT_FOUND", NVML_ERROR_NOT_FOUND)
NVMLError_DriverNotLoaded = _error_class("DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST)
NVMLError_LibRmVersionMismatch = _error_class("LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH)
NVMLError_Unknown = _error_class("UNKNOWN", NVML_ERROR_UNKNOWN)


# Return shapes, named after pynvml's structs.
@dataclass(frozen=True)
class FakeMemoryInfo:  # c_nvmlMemory_t
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class FakeUtilization:  # c_nvmlUtilization_t
    gpu: int
    memory: int


@dataclass(frozen=True)
class FakeProcessInfo:  # nvmlFriendlyObject from nvmlDeviceGetComputeRunningProcesses; pynvml's names
    pid: int
    usedGpuMemory: int | None  # None is Windows WDDM's "not available"
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(frozen=True)
class FakePciInfo:  # nvmlPciInfo_t (pynvml decodes its char arrays to str)
    busId: str  # "00000000:01:00.0": an 8-digit domain, upper-case hex
    busIdLegacy: str  # "0000:01:00.0"
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int


@dataclass(frozen=True)
class FakeHandle:
    index: int


# Scripts.
@dataclass(frozen=True)
class FakeProcess:
    pid: int
    used_gpu_memory_bytes: int | None


@dataclass(frozen=True)
class FakeReading:
    """What the GPU reports at one moment. Defaults: an idle desktop GPU."""

    memory_used_bytes: int = 300 * MIB
    utilization_gpu_pct: int = 0
    utilization_memory_pct: int = 0
    pcie_rx_kb_per_s: int = 0
    pcie_tx_kb_per_s: int = 0
    clock_graphics_mhz: int = 210
    clock_memory_mhz: int = 405
    temperature_c: int = 35
    power_mw: int = 20_000
    processes: tuple[FakeProcess, ...] = ()

    def with_(self, **changes: Any) -> FakeReading:
        return replace(self, **changes)


def hold(reading: FakeReading, steps: int) -> tuple[FakeReading, ...]:
    return (reading,) * steps


def ramp(start: FakeReading, end: FakeReading, steps: int) -> tuple[FakeReading, ...]:
    """`steps` readings from `start` to `end` inclusive, numbers interpolated linearly.

    Processes present in both keep their pid and have their memory interpolated; otherwise
    the process list switches from start's to end's halfway.
    """
    if steps < 2:
        return (end,) * max(steps, 0)
    out: list[FakeReading] = []
    for i in range(steps):
        t = i / (steps - 1)
        values: dict[str, Any] = {}
        for f in fields(FakeReading):
            a, b = getattr(start, f.name), getattr(end, f.name)
            if f.name == "processes":
                values[f.name] = _ramp_processes(a, b, t)
            else:
                values[f.name] = round(a + (b - a) * t)
        out.append(FakeReading(**values))
    return tuple(out)


def _ramp_processes(a: tuple[FakeProcess, ...], b: tuple[FakeProcess, ...], t: float) -> tuple[FakeProcess, ...]:
    if [p.pid for p in a] != [p.pid for p in b]:
        return a if t < 0.5 else b
    out = []
    for pa, pb in zip(a, b, strict=True):
        if pa.used_gpu_memory_bytes is None or pb.used_gpu_memory_bytes is None:
            out.append(pb)
        else:
            used = round(pa.used_gpu_memory_bytes + (pb.used_gpu_memory_bytes - pa.used_gpu_memory_bytes) * t)
            out.append(FakeProcess(pa.pid, used))
    return tuple(out)


@dataclass(frozen=True)
class FakeGpu:
    """Static facts of one device (defaults: an RTX 4090 as NVML reports it) and its reading script."""

    name: str = "NVIDIA GeForce RTX 4090"
    memory_total_bytes: int = 24 * GIB
    uuid: str | None = None  # None: generated from the index
    pci_bus_id: str | None = None  # NVML's busId; None: bus index + 1 ("00000000:01:00.0" for GPU 0)
    memory_bus_width_bits: int = 384
    memory_clock_max_mhz: int = 10501
    pcie_max_generation: int = 4
    pcie_max_width: int = 16
    pcie_curr_generation: int = 1  # links train down when idle
    pcie_curr_width: int = 16
    display_active: bool = False
    readings: Sequence[FakeReading] = (FakeReading(),)
    step_s: float = 1.0  # how long each reading lasts in time mode
    unsupported: frozenset[str] = frozenset()  # device function names that raise NotSupported
    errors: Mapping[str, int] = field(default_factory=dict)  # device function name -> NVML error code


class FakeClock:
    """A clock the test moves: pass `clock=FakeClock()` and call `advance(seconds)`."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


class FakeNvml:
    """Stand-in for the `pynvml` module. Device calls before nvmlInit raise Uninitialized, as NVML does."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Uninitialized = NVMLError_Uninitialized

    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_GRAPHICS = NVML_CLOCK_GRAPHICS
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_CLOCK_VIDEO = NVML_CLOCK_VIDEO
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        driver_version: str = "550.54.15",
        cuda_driver_version: int = 12040,
        init_error: int | None = None,
        errors: Mapping[str, int] | None = None,
        clock: Callable[[], float] | None = None,
        names_as_bytes: bool = False,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.init_error = init_error
        self.errors = dict(errors or {})  # system-level function name -> NVML error code
        self.clock = clock
        self.names_as_bytes = names_as_bytes  # pynvml before 11.5 returned bytes
        self.step = 0
        self.init_calls = 0
        self.shutdown_calls = 0
        self._refcount = 0
        self.calls: list[str] = []

    # Scripting
    def tick(self, steps: int = 1) -> None:
        """Step mode: move every GPU to its next reading."""
        self.step += steps

    def reading(self, index: int) -> FakeReading:
        gpu = self.gpus[index]
        position = int(self.clock() // gpu.step_s) if self.clock is not None else self.step
        return gpu.readings[max(0, min(position, len(gpu.readings) - 1))]

    @property
    def initialized(self) -> bool:
        return self._refcount > 0

    # Plumbing
    def _enter(self, fn: str) -> None:
        self.calls.append(fn)
        if fn in self.errors:
            raise NVMLError(self.errors[fn])
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _device(self, fn: str, handle: object) -> FakeGpu:
        self._enter(fn)
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if fn in gpu.errors:
            raise NVMLError(gpu.errors[fn])
        if fn in gpu.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _str(self, text: str) -> str | bytes:
        return text.encode() if self.names_as_bytes else text

    # Library (method names are pynvml's)
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        self.init_calls += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self._refcount += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdown_calls += 1
        self._refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._enter("nvmlSystemGetDriverVersion")
        return self._str(self.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        code = self.gpus[index].errors.get("nvmlDeviceGetHandleByIndex")
        if code is not None:
            raise NVMLError(code)
        return FakeHandle(index)

    # Device facts
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        return self._str(self._device("nvmlDeviceGetName", handle).name)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str | bytes:
        gpu = self._device("nvmlDeviceGetUUID", handle)
        return self._str(gpu.uuid or f"GPU-{handle.index:08x}-0000-0000-0000-000000000000")

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        gpu = self._device("nvmlDeviceGetPciInfo", handle)
        bus_id = gpu.pci_bus_id or f"00000000:{handle.index + 1:02X}:00.0"
        domain, bus, rest = bus_id.split(":")
        dev = rest.split(".")[0]
        return FakePciInfo(
            busId=bus_id,
            busIdLegacy=f"{int(domain, 16):04X}:{bus}:{rest}",
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(dev, 16),
            pciDeviceId=0x268410DE,  # AD102 [GeForce RTX 4090] with NVIDIA's vendor id, as NVML packs them
            pciSubSystemId=0,
        )

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: object = None) -> FakeMemoryInfo:
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle)
        used = min(self.reading(handle.index).memory_used_bytes, gpu.memory_total_bytes)
        return FakeMemoryInfo(total=gpu.memory_total_bytes, free=gpu.memory_total_bytes - used, used=used)

    def nvmlDeviceGetMemoryBusWidth(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetMemoryBusWidth", handle).memory_bus_width_bits

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._device("nvmlDeviceGetMaxClockInfo", handle)
        if clock_type == NVML_CLOCK_MEM:
            return gpu.memory_clock_max_mhz
        if clock_type in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
            return 3105
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_max_generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_max_width

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_curr_generation

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_curr_width

    def nvmlDeviceGetDisplayActive(self, handle: FakeHandle) -> int:
        active = self._device("nvmlDeviceGetDisplayActive", handle).display_active
        return NVML_FEATURE_ENABLED if active else NVML_FEATURE_DISABLED

    # Live readings
    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        self._device("nvmlDeviceGetUtilizationRates", handle)
        r = self.reading(handle.index)
        return FakeUtilization(gpu=r.utilization_gpu_pct, memory=r.utilization_memory_pct)

    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        self._device("nvmlDeviceGetPcieThroughput", handle)
        r = self.reading(handle.index)
        if counter == NVML_PCIE_UTIL_RX_BYTES:
            return r.pcie_rx_kb_per_s
        if counter == NVML_PCIE_UTIL_TX_BYTES:
            return r.pcie_tx_kb_per_s
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        self._device("nvmlDeviceGetClockInfo", handle)
        r = self.reading(handle.index)
        if clock_type in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
            return r.clock_graphics_mhz
        if clock_type == NVML_CLOCK_MEM:
            return r.clock_memory_mhz
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        self._device("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.reading(handle.index).temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        self._device("nvmlDeviceGetPowerUsage", handle)
        return self.reading(handle.index).power_mw

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        return [FakeProcessInfo(p.pid, p.used_gpu_memory_bytes) for p in self.reading(handle.index).processes]
