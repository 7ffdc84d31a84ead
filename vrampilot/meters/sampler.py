"""The sampling thread: psutil, NVML, llama.cpp's devices and Windows' GPU counters a few times a second.

It runs on its own thread so that the meters keep moving while the engine is busy and the GUI
thread never waits on a driver call; listeners receive each sample on this thread (the Qt adapter
re-emits it as a signal). One NVML session stays open while sampling: nvmlInit costs milliseconds
and re-initialising at 4 Hz would be most of the sampler's cost.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psutil

from vrampilot import llamacpp
from vrampilot.hardware import (
    CPU_FALLBACK,
    GpuInfo,
    GpuSample,
    NvmlApi,
    detect_nvidia_gpus,
    load_pynvml,
    read_gpu_sample,
)
from vrampilot.meters.devices import LlamaDeviceReader
from vrampilot.meters.host import HostReader
from vrampilot.meters.types import MeterSample
from vrampilot.meters.winshared import SharedMemoryReader, open_shared_memory_reader

# The budget: 2-4 Hz on the GUI. The CLI may go slower; faster would cost more than 1% of
# a core for readings that change no faster than NVML's own ~20 ms-1 s averaging windows.
MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 10.0
DEFAULT_INTERVAL_S = 0.5
DEFAULT_HISTORY_S = 300.0

Listener = Callable[[MeterSample], None]


class Sampler:
    """Samples process/system RAM and CPU, every NVIDIA GPU, the GPUs only llama.cpp sees (Vulkan:
    AMD, Intel; meters/devices.py), and (Windows) shared GPU memory.

    `nvml` is pynvml's module API (or the test double); None loads pynvml. `use_nvml=False` skips
    the GPU entirely. `clock` stamps samples and must be monotonic; tests pass a FakeClock.
    History is bounded to `history_s` seconds of samples.
    """

    def __init__(
        self,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        history_s: float = DEFAULT_HISTORY_S,
        nvml: NvmlApi | None = None,
        nvml_loader: Callable[[], NvmlApi] = load_pynvml,
        use_nvml: bool = True,
        pid: int | None = None,
        shared_reader: SharedMemoryReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
            raise ValueError(f"sampling interval must be {MIN_INTERVAL_S}-{MAX_INTERVAL_S} s, got {interval_s}")
        self.interval_s = interval_s
        self.history_s = history_s
        self.pid = os.getpid() if pid is None else pid
        # `vrampilot monitor --pid` watches one process and ends with it; the app's sampler moves.
        self._own_pid_only = pid is not None
        self._clock = clock
        self._nvml_arg = nvml
        self._nvml_loader = nvml_loader
        self._use_nvml = use_nvml
        self._shared_arg = shared_reader
        self._host: HostReader | None = None
        self._nvml: NvmlApi | None = None
        self._shared: SharedMemoryReader | None = None
        self._devices: tuple[GpuInfo, ...] = ()  # NVML's, then llama.cpp's others
        self._nvml_devices: tuple[GpuInfo, ...] = ()
        self._llama_devices: LlamaDeviceReader | None = None  # once llama.cpp is loaded here
        self._gpu_status = "not started"
        self._opened = False
        self._open_lock = threading.Lock()
        self._lock = threading.Lock()
        self._history: deque[MeterSample] = deque(maxlen=max(2, int(history_s / interval_s) + 1))
        self._listeners: list[Listener] = []
        self._count = 0  # samples taken so far; a reader's bookmark for samples_since()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_cpu_s = 0.0
        self.error: str | None = None  # the last failure of the sampling thread, for a person

    # Lifecycle
    def open(self) -> None:
        """Detect GPUs and hold NVML open. Idempotent; start() and sample_once() call it."""
        with self._open_lock:
            if self._opened:
                return
            self._host = HostReader(self.pid)
            self._shared = self._shared_arg or open_shared_memory_reader(self.pid)
            if self._use_nvml:
                self._open_nvml()
            else:
                self._gpu_status = "GPU meters off"
            self._opened = True

    def _open_nvml(self) -> None:
        nvml = self._nvml_arg
        if nvml is None:
            try:
                nvml = self._nvml_loader()
            except ImportError:
                self._gpu_status = "no GPU meters: the nvidia-ml-py package is not installed"
                return
            except Exception as exc:
                self._gpu_status = f"no GPU meters: nvidia-ml-py failed to load ({exc})"
                return
        detection = detect_nvidia_gpus(nvml)
        if not detection.available:
            # Detection's line ends with what the planner does about it; the meters say their own.
            self._gpu_status = "no GPU meters: " + detection.status.removesuffix(f": {CPU_FALLBACK}")
            return
        if not detection.gpus:
            self._gpu_status = "no GPU meters: NVML found no NVIDIA GPU (AMD and Intel GPUs have no NVML)"
            return
        try:
            nvml.nvmlInit()  # held until close(); detection above opened and closed its own
        except Exception as exc:
            self._gpu_status = f"no GPU meters: NVML failed to start ({exc})"
            return
        self._nvml = nvml
        self._devices = self._nvml_devices = detection.gpus
        self._gpu_status = detection.status

    def close(self) -> None:
        self.stop()
        with self._open_lock:
            if self._nvml is not None:
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
                self._nvml = None
            if self._shared is not None:
                self._shared.close()
            self._opened = False

    def __enter__(self) -> Sampler:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Sample on a daemon thread until stop(); daemon so a forgotten sampler never blocks exit."""
        if self._thread is not None and self._thread.is_alive():
            return
        self.open()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vrampilot-meters", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except psutil.NoSuchProcess:
                self.error = f"process {self.pid} has exited"
                if self.pid == os.getpid() or self._own_pid_only:
                    return
                self.watch(None)  # the served model's process ended: back to this one
                continue
            except Exception as exc:  # one bad reading must not end the meters for the session
                self.error = f"sampling failed: {exc}"
            # thread_time() is this thread's CPU alone: the bench and the panel's tooltip report it.
            self._thread_cpu_s = time.thread_time()
            # Keep the rate fixed rather than drifting by the time each sample takes.
            next_at += self.interval_s
            delay = next_at - self._clock()
            if delay < 0:
                next_at = self._clock()
                delay = 0.0
            self._stop.wait(delay)

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the sampling thread has used so far."""
        return self._thread_cpu_s

    # Readings
    @property
    def clock(self) -> Callable[[], float]:
        """The clock samples are stamped with; MeterState uses the same one for reply times."""
        return self._clock

    @property
    def devices(self) -> tuple[GpuInfo, ...]:
        return self._devices

    @property
    def gpu_status(self) -> str:
        return self._gpu_status

    def watch(self, pid: int | None) -> None:
        """Measure another process from the next sample on (None: this one): the app's llama-server
        holds the model while it serves, so its memory is what the meters must show."""
        self.open()
        new = os.getpid() if pid is None else pid
        if new == self.pid:
            return
        host = HostReader(new)
        shared = self._shared_arg or open_shared_memory_reader(new)
        with self._open_lock:
            old = self._shared
            self.pid, self._host, self._shared = new, host, shared
        if old is not None and old is not self._shared_arg:
            old.close()

    def sample_once(self) -> MeterSample:
        """Read everything now, append to history and notify listeners (on the calling thread)."""
        self.open()
        with self._open_lock:
            reader, shared_reader = self._host, self._shared
        assert reader is not None and shared_reader is not None
        host = reader.read()
        gpus = self._read_gpus()
        shared = shared_reader.read()
        sample = MeterSample(
            time_s=self._clock(),
            wall_time_s=time.time(),
            pid=self.pid,
            host=host,
            gpus=gpus,
            devices=self._devices,
            gpu_status=self._gpu_status,
            shared=shared,
            shared_status=shared_reader.reason,
        )
        with self._lock:
            self._history.append(sample)
            self._count += 1
            listeners = list(self._listeners)
        for listener in listeners:
            listener(sample)
        return sample

    def _open_llama_devices(self) -> LlamaDeviceReader | None:
        """llama.cpp's devices, read from the first sample after the engine has loaded (the app
        opens its meters before that, and the meters never load it themselves)."""
        if self._llama_devices is None and self._use_nvml and llamacpp.loaded():
            nvml_devices = self._nvml_devices
            reader = LlamaDeviceReader(skip_cuda=self._nvml is not None, first_index=len(nvml_devices))
            self._llama_devices = reader
            if reader.devices:
                self._devices = (*nvml_devices, *reader.devices)
                self._gpu_status = reader.status if not nvml_devices else f"{self._gpu_status}; {reader.status}"
        return self._llama_devices

    def _read_gpus(self) -> tuple[GpuSample, ...]:
        llama = self._open_llama_devices()
        others = llama.read(this_process=self.pid == os.getpid()) if llama is not None else ()
        nvml = self._nvml
        if nvml is None:
            return others
        out: list[GpuSample] = []
        lost: list[str] = []
        for device in self._nvml_devices:
            try:
                out.append(read_gpu_sample(nvml, device.index, pid=self.pid))
            except Exception as exc:  # NVMLError "GPU is lost" and the like: keep the others going
                lost.append(f"GPU {device.index} unreadable ({exc})")
        if lost:
            self._gpu_status = "; ".join(lost)
        return (*out, *others)

    def history(self, since_s: float | None = None) -> list[MeterSample]:
        with self._lock:
            samples = list(self._history)
        if since_s is None:
            return samples
        return [s for s in samples if s.time_s >= since_s]

    def samples_since(self, count: int) -> tuple[list[MeterSample], int]:
        """Samples taken after the reader's bookmark `count`, and the new bookmark.

        The GUI polls this from its own thread at the sampling rate: no per-sample queued events
        pile up while the GUI is busy, and a reader that fell behind the history gets what is left.
        """
        with self._lock:
            new = min(self._count - count, len(self._history))
            return (list(self._history)[-new:] if new > 0 else []), self._count

    def latest(self) -> MeterSample | None:
        with self._lock:
            return self._history[-1] if self._history else None

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(sample)` on the sampling thread for every sample; returns unsubscribe."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe


def describe_sampler(sampler: Sampler) -> dict[str, Any]:
    """Static facts for the CLI's JSON header and the panel's tooltip."""
    return {
        "pid": sampler.pid,
        "interval_s": sampler.interval_s,
        "gpu_status": sampler.gpu_status,
        "gpus": [
            {
                "index": d.index,
                "name": d.name,
                "memory_total_bytes": d.memory_total_bytes,
                "peak_bandwidth_gbps": d.peak_bandwidth_gbps,
                "bandwidth_source": d.bandwidth_source,
            }
            for d in sampler.devices
        ],
    }
