"""Process and system RAM and CPU through psutil: the meters that work on every machine."""

from __future__ import annotations

import psutil

from vrampilot.meters.types import HostSample


class HostReader:
    """Reads one process (this one by default) and the system's RAM.

    Keeps the psutil.Process object between reads because psutil's CPU percentage is measured
    between two calls on the same object; a fresh object would always report 0.
    """

    def __init__(self, pid: int | None = None) -> None:
        self._process = psutil.Process(pid)
        self._logical = psutil.cpu_count(logical=True) or 1
        # Prime the CPU counter so the first real read covers the first interval, not process life.
        self._process.cpu_percent(None)

    @property
    def pid(self) -> int:
        pid: int = self._process.pid
        return pid

    def read(self) -> HostSample:
        """Raises psutil.NoSuchProcess when a watched process has exited."""
        # oneshot() caches /proc/<pid>/stat between the calls below: one read instead of three.
        with self._process.oneshot():
            if self._process.status() == psutil.STATUS_ZOMBIE:  # ended, not yet reaped: it holds nothing
                raise psutil.NoSuchProcess(self._process.pid)
            rss = self._process.memory_info().rss
            cpu = self._process.cpu_percent(None)
            threads = self._process.num_threads()
        vm = psutil.virtual_memory()
        return HostSample(
            process_rss_bytes=int(rss),
            # psutil divides CPU time by wall time between reads; two reads milliseconds apart
            # (a CLI's first line, a test) can exceed what the cores allow, which is not real.
            process_cpu_pct=min(float(cpu), 100.0 * self._logical),
            process_threads=int(threads),
            ram_total_bytes=int(vm.total),
            ram_available_bytes=int(vm.available),
            logical_cores=self._logical,
        )
