"""Windows' per-process GPU memory counters: where the driver's system-memory fallback shows.

When a CUDA process asks for more VRAM than is free, the Windows driver (WDDM, with the default
"CUDA - Sysmem Fallback Policy") quietly backs the rest with system RAM, and generation slows
3-5x. NVML does not see it; the `GPU Process Memory(pid_<pid>_luid_..._phys_<n>)` performance
counters do: `Shared Usage` grows by what spilled, and `Dedicated Usage` is the process's VRAM,
which NVML cannot report per process under WDDM.

Two readers: win32pdh (pywin32) when installed, which costs microseconds per read; otherwise one
long-lived `typeperf` child printing once a second, because starting typeperf takes about a second
and the sampler must not block on it. Elsewhere the reader says why there is nothing to read.
"""

from __future__ import annotations

import contextlib
import csv
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from vrampilot.meters.types import SharedGpuMemory

COUNTER_SET = "GPU Process Memory"
SHARED = "Shared Usage"
DEDICATED = "Dedicated Usage"
# A process gets counter instances only once it touches the GPU (one per adapter), so the
# wildcard is expanded again this often until, and after, they appear.
REEXPAND_S = 5.0
NOT_WINDOWS = "shared GPU memory counters exist only on Windows"


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


def counter_paths(pid: int) -> tuple[str, str]:
    """Wildcard paths for the process's shared and dedicated usage, summed over adapters."""
    instance = f"pid_{pid}_*"
    return (f"\\{COUNTER_SET}({instance})\\{SHARED}", f"\\{COUNTER_SET}({instance})\\{DEDICATED}")


def _belongs(path: str, pid: int) -> bool:
    # "pid_12_*" must not also match pid 123: the instance continues with "_luid_".
    return f"(pid_{pid}_" in path


def _sum_usage(values: dict[str, float], pid: int) -> SharedGpuMemory | None:
    """Sum per-adapter counter values (path -> bytes) for `pid`; None when it has no instance."""
    shared = [v for p, v in values.items() if _belongs(p, pid) and p.endswith(SHARED)]
    dedicated = [v for p, v in values.items() if _belongs(p, pid) and p.endswith(DEDICATED)]
    if not shared and not dedicated:
        return None
    return SharedGpuMemory(
        shared_bytes=int(sum(shared)),
        dedicated_bytes=int(sum(dedicated)) if dedicated else None,
    )


def parse_typeperf(header: str, row: str, pid: int) -> SharedGpuMemory | None:
    """One typeperf CSV data row against its header -> the process's usage.

    typeperf prints `"(PDH-CSV 4.0)","\\\\HOST\\GPU Process Memory(pid_..)\\Shared Usage",...`, then
    rows of `"<timestamp>","<value>",...`; a counter it could not read this second is `" "`.
    """
    names = next(csv.reader([header]), [])
    cells = next(csv.reader([row]), [])
    values: dict[str, float] = {}
    for name, cell in zip(names[1:], cells[1:], strict=False):
        with contextlib.suppress(ValueError):
            values[name] = float(cell)
    return _sum_usage(values, pid)


class PdhReader:
    """win32pdh: one query holding a counter per adapter instance of the process."""

    def __init__(self, pdh: Any, pid: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.reason: str | None = None
        self._pdh = pdh
        self._pid = pid
        self._clock = clock
        self._query = pdh.OpenQuery()
        self._counters: dict[str, Any] = {}
        self._expanded_at: float | None = None

    def _expand(self) -> None:
        wanted: set[str] = set()
        for pattern in counter_paths(self._pid):
            with contextlib.suppress(Exception):  # PDH_CSTATUS_NO_INSTANCE until the GPU is touched
                wanted.update(self._pdh.ExpandCounterPath(pattern))
        for path in set(self._counters) - wanted:
            with contextlib.suppress(Exception):
                self._pdh.RemoveCounter(self._counters.pop(path))
        for path in wanted - set(self._counters):
            with contextlib.suppress(Exception):
                self._counters[path] = self._pdh.AddCounter(self._query, path)
        self._expanded_at = self._clock()

    def read(self) -> SharedGpuMemory | None:
        if self._expanded_at is None or self._clock() - self._expanded_at >= REEXPAND_S:
            self._expand()
        if not self._counters:
            self.reason = "this process has not used the GPU yet"
            return None
        try:
            self._pdh.CollectQueryData(self._query)
        except Exception as exc:
            self.reason = f"performance counters failed: {exc}"
            return None
        values: dict[str, float] = {}
        for path, handle in self._counters.items():
            with contextlib.suppress(Exception):  # an adapter instance vanished since the expand
                values[path] = float(self._pdh.GetFormattedCounterValue(handle, self._pdh.PDH_FMT_LARGE)[1])
        self.reason = None
        return _sum_usage(values, self._pid)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pdh.CloseQuery(self._query)


class TypeperfReader:
    """A `typeperf -si 1` child whose CSV lines a daemon thread parses; read() returns the latest.

    typeperf expands wildcards once at start and exits with "No valid counters" while the process
    has no instance yet, so the child is restarted every REEXPAND_S until it stays up.
    """

    def __init__(self, pid: int, exe: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.reason: str | None = "waiting for typeperf"
        self._pid = pid
        self._exe = exe
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: SharedGpuMemory | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._started_at = -REEXPAND_S
        self._closed = False

    def _start(self) -> None:
        flags = getattr(subprocess, "CREATE_NO_WINDOW", 0)  # no console window flashing up
        self._proc = subprocess.Popen(
            [self._exe, *counter_paths(self._pid), "-si", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            creationflags=flags,
        )
        self._started_at = self._clock()
        threading.Thread(target=self._pump, args=(self._proc,), name="vrampilot-typeperf", daemon=True).start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        header: str | None = None
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line.startswith('"(PDH-CSV'):
                header = line
            elif header and line.startswith('"'):
                usage = parse_typeperf(header, line, self._pid)
                with self._lock:
                    self._latest = usage
                    self.reason = None if usage else "this process has not used the GPU yet"

    def read(self) -> SharedGpuMemory | None:
        if self._closed:
            return None
        running = self._proc is not None and self._proc.poll() is None
        if not running and self._clock() - self._started_at >= REEXPAND_S:
            try:
                self._start()
            except OSError as exc:
                self.reason = f"typeperf failed to start: {exc}"
        with self._lock:
            return self._latest

    def close(self) -> None:
        self._closed = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()


def open_shared_memory_reader(pid: int, platform: str = sys.platform) -> SharedMemoryReader:
    """The best reader this machine offers; never raises."""
    if platform != "win32":
        return UnavailableReader(NOT_WINDOWS)
    try:
        import win32pdh

        return PdhReader(win32pdh, pid)
    except Exception:  # ImportError, or PDH itself failing: try the command-line tool
        pass
    exe = shutil.which("typeperf")
    if exe:
        return TypeperfReader(pid, exe)
    return UnavailableReader("neither pywin32 (win32pdh) nor typeperf is available to read GPU counters")
