"""Windows' per-process GPU memory counters: where the driver's system-memory fallback shows.

When a CUDA process asks for more VRAM than is free, the Windows driver (WDDM, with the default
"CUDA - Sysmem Fallback Policy") quietly backs the rest with system RAM, and generation slows
3-5x. NVML does not see it; the `GPU Process Memory(pid_<pid>_luid_..._phys_<n>)` performance
counters do: `Shared Usage` grows by what spilled, and `Dedicated Usage` is the process's VRAM,
which NVML cannot report per process under WDDM.

Read through pdh.dll with ctypes (every Windows has it; no pywin32, no child process): one query
holding the two counters with a wildcard instance, added by their English names
(`PdhAddEnglishCounterW`), since Windows localises counter names and "GPU Process Memory" is
"GPU-Prozessspeicher" on a German system. `PdhGetFormattedCounterArrayW` returns every instance
at each collection, so instances that appear once the process first touches the GPU (one per
adapter) are picked up without adding anything again; the process's own are those named
`pid_<pid>_...`. The calls live in `CtypesPdh`; the reader talks to it through `PdhApi`, the seam
the tests' double stands at. Elsewhere the reader says why there is nothing to read.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from vrampilot.meters.types import SharedGpuMemory

COUNTER_SET = "GPU Process Memory"
SHARED = "Shared Usage"
DEDICATED = "Dedicated Usage"
NOT_WINDOWS = "shared GPU memory counters exist only on Windows"
NO_COUNTERS = "this Windows has no GPU Process Memory counters (they need Windows 10 1709 or later and a WDDM 2 driver)"
NOT_YET = "this process has not used the GPU yet"

# pdh.h / pdhmsg.h
PDH_FMT_LARGE = 0x00000400
PDH_MORE_DATA = 0x800007D2
PDH_NO_DATA = 0x800007D5
PDH_CSTATUS_NO_INSTANCE = 0x800007D1
PDH_CSTATUS_NO_OBJECT = 0xC0000BB8
PDH_CSTATUS_NO_COUNTER = 0xC0000BB9
PDH_INVALID_DATA = 0xC0000BC6
PDH_CSTATUS_VALID_DATA = 0x00000000
PDH_CSTATUS_NEW_DATA = 0x00000001
# An instance the wildcard matched no longer exists, or no instance exists yet.
_NOTHING_YET = (PDH_NO_DATA, PDH_CSTATUS_NO_INSTANCE, PDH_INVALID_DATA)


class PdhError(OSError):
    def __init__(self, call: str, status: int) -> None:
        self.status = status & 0xFFFFFFFF
        super().__init__(f"{call} failed (PDH status 0x{self.status:08X})")


class PdhApi(Protocol):
    """What the reader needs of pdh.dll. Each raises PdhError with PDH's status."""

    def open_query(self) -> int: ...

    def add_english_counter(self, query: int, path: str) -> int: ...

    def collect(self, query: int) -> None: ...

    def formatted_array(self, counter: int) -> Sequence[tuple[str, int, int]]:
        """(instance name, the item's CStatus, the value as PDH_FMT_LARGE) per instance."""
        ...

    def close_query(self, query: int) -> None: ...


class _FmtValue(ctypes.Structure):
    # PDH_FMT_COUNTERVALUE: a DWORD status, then a union whose 8-byte members align it to 8.
    _fields_ = [("CStatus", ctypes.c_uint32), ("largeValue", ctypes.c_int64)]


class _FmtItem(ctypes.Structure):
    """PDH_FMT_COUNTERVALUE_ITEM_W."""

    _fields_ = [("szName", ctypes.c_wchar_p), ("FmtValue", _FmtValue)]


class CtypesPdh:
    """The real pdh.dll."""

    def __init__(self) -> None:
        loader: Callable[[str], Any] = getattr(ctypes, "WinDLL", ctypes.CDLL)
        dll = loader("pdh.dll")  # OSError where there is none
        status = ctypes.c_uint32
        handle = ctypes.c_void_p
        self._open = dll.PdhOpenQueryW
        self._open.restype = status
        self._open.argtypes = (ctypes.c_wchar_p, ctypes.c_size_t, ctypes.POINTER(handle))
        self._add = dll.PdhAddEnglishCounterW
        self._add.restype = status
        self._add.argtypes = (handle, ctypes.c_wchar_p, ctypes.c_size_t, ctypes.POINTER(handle))
        self._collect = dll.PdhCollectQueryData
        self._collect.restype = status
        self._collect.argtypes = (handle,)
        self._array = dll.PdhGetFormattedCounterArrayW
        self._array.restype = status
        self._array.argtypes = (
            handle,
            ctypes.c_uint32,
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_void_p,
        )
        self._close = dll.PdhCloseQuery
        self._close.restype = status
        self._close.argtypes = (handle,)

    @staticmethod
    def _check(call: str, status: int) -> None:
        if status != 0:
            raise PdhError(call, status)

    def open_query(self) -> int:
        query = ctypes.c_void_p()
        self._check("PdhOpenQueryW", self._open(None, 0, ctypes.byref(query)))
        return int(query.value or 0)

    def add_english_counter(self, query: int, path: str) -> int:
        counter = ctypes.c_void_p()
        self._check("PdhAddEnglishCounterW", self._add(query, path, 0, ctypes.byref(counter)))
        return int(counter.value or 0)

    def collect(self, query: int) -> None:
        self._check("PdhCollectQueryData", self._collect(query))

    def formatted_array(self, counter: int) -> Sequence[tuple[str, int, int]]:
        size, count = ctypes.c_uint32(0), ctypes.c_uint32(0)
        buffer: ctypes.Array[ctypes.c_char] | None = None
        for _ in range(3):  # a process that starts between the two calls makes the buffer short again
            status = self._array(counter, PDH_FMT_LARGE, ctypes.byref(size), ctypes.byref(count), buffer)
            if status != PDH_MORE_DATA:
                break
            # The items, then the instance names they point at, in one buffer of the size PDH asked for.
            buffer = ctypes.create_string_buffer(size.value)
        self._check("PdhGetFormattedCounterArrayW", status)
        if buffer is None:
            return ()
        items = ctypes.cast(buffer, ctypes.POINTER(_FmtItem))
        return [
            (items[i].szName or "", int(items[i].FmtValue.CStatus), int(items[i].FmtValue.largeValue))
            for i in range(count.value)
        ]

    def close_query(self, query: int) -> None:
        self._close(query)


class SharedMemoryReader(Protocol):
    """`read()` is None when nothing can be read now; `reason` says why, for a person."""

    reason: str | None

    def read(self) -> SharedGpuMemory | None: ...

    def close(self) -> None: ...


class UnavailableReader:
    def __init__(self, reason: str) -> None:
        self.reason: str | None = reason

    def read(self) -> SharedGpuMemory | None:
        return None

    def close(self) -> None:
        pass


def counter_path(counter: str) -> str:
    """Every process's instances: PDH matches a whole-instance wildcard on every Windows, and the
    process's own are picked by name (`process_usage`)."""
    return f"\\{COUNTER_SET}(*)\\{counter}"


def belongs(instance: str, pid: int) -> bool:
    """ "pid_12_luid_..." is pid 12's, never pid 123's: the pid is followed by "_luid_"."""
    return instance.lower().startswith(f"pid_{pid}_")


def process_usage(
    shared: Sequence[tuple[str, int, int]], dedicated: Sequence[tuple[str, int, int]], pid: int
) -> SharedGpuMemory | None:
    """The process's usage summed over its adapters; None while it has no instance. Items whose
    status is not valid data (an instance that went away during the collection) are left out."""

    def values(items: Sequence[tuple[str, int, int]]) -> list[int]:
        ok = (PDH_CSTATUS_VALID_DATA, PDH_CSTATUS_NEW_DATA)
        return [value for name, status, value in items if belongs(name, pid) and status in ok]

    shared_values, dedicated_values = values(shared), values(dedicated)
    if not shared_values and not dedicated_values:
        return None
    return SharedGpuMemory(
        shared_bytes=sum(shared_values),
        dedicated_bytes=sum(dedicated_values) if dedicated_values else None,
    )


class PdhReader:
    """One PDH query with the two wildcard counters, collected at each read (microseconds)."""

    def __init__(self, pdh: PdhApi, pid: int) -> None:
        """Raises PdhError when the counters cannot be added (`open_shared_memory_reader` says why)."""
        self.reason: str | None = None
        self._pdh = pdh
        self._pid = pid
        self._query = pdh.open_query()
        try:
            self._shared = pdh.add_english_counter(self._query, counter_path(SHARED))
            self._dedicated = pdh.add_english_counter(self._query, counter_path(DEDICATED))
        except PdhError:
            pdh.close_query(self._query)
            raise

    def _array(self, counter: int) -> Sequence[tuple[str, int, int]]:
        try:
            return self._pdh.formatted_array(counter)
        except PdhError as exc:
            if exc.status in _NOTHING_YET:
                return ()
            raise

    def read(self) -> SharedGpuMemory | None:
        try:
            self._pdh.collect(self._query)
            usage = process_usage(self._array(self._shared), self._array(self._dedicated), self._pid)
        except PdhError as exc:
            if exc.status not in _NOTHING_YET:
                self.reason = f"performance counters failed: {exc}"
                return None
            usage = None
        self.reason = None if usage is not None else NOT_YET
        return usage

    def close(self) -> None:
        self._pdh.close_query(self._query)


def open_shared_memory_reader(
    pid: int, platform: str = sys.platform, pdh: Callable[[], PdhApi] = CtypesPdh
) -> SharedMemoryReader:
    """The reader this machine offers; never raises."""
    if platform != "win32":
        return UnavailableReader(NOT_WINDOWS)
    try:
        return PdhReader(pdh(), pid)
    except PdhError as exc:
        if exc.status in (PDH_CSTATUS_NO_OBJECT, PDH_CSTATUS_NO_COUNTER):
            return UnavailableReader(NO_COUNTERS)
        return UnavailableReader(f"performance counters failed: {exc}")
    except (OSError, AttributeError) as exc:  # no pdh.dll, or one without the function
        return UnavailableReader(f"performance counters not readable ({exc})")
