"""MeterState: samples + the plan + measured decode speeds -> what the meters show.

The GUI and tests feed it; it never reads hardware itself. The engine's per-reply stats arrive
through `record_decode`, so the meters need nothing from the engine package and the engine nothing
from the meters. Thread-safe: samples may arrive on one thread while the app records a reply on
another.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from vrampilot.meters.bandwidth import BandwidthReading, achieved_bandwidth, expected_decode_tps
from vrampilot.meters.spill import (
    DEFAULT_REPLY_WINDOW_S,
    IDLE,
    SHARED_RISE_BYTES,
    SpillAssessment,
    SpillSummary,
    assess,
    spill_summary,
)
from vrampilot.meters.types import MeterSample
from vrampilot.planner.plan import Plan


@dataclass(frozen=True)
class PlannedVram:
    """The plan's prediction for one GPU, in the groups the VRAM bar draws."""

    weights_bytes: int
    kv_bytes: int
    compute_bytes: int  # compute and output buffers
    margin_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.margin_bytes

    @property
    def used_bytes(self) -> int:
        """What llama.cpp allocates; the margin is room left for the CUDA context and the driver."""
        return self.weights_bytes + self.kv_bytes + self.compute_bytes


@dataclass(frozen=True)
class VramView:
    """One GPU's memory: measured (this process, other programs, free) and planned, same scale."""

    index: int
    name: str
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    process_bytes: int | None
    # "nvml", "windows counters" or "llama.cpp" (its own buffers, where the driver reports no use)
    process_source: str | None
    planned: PlannedVram | None

    @property
    def others_bytes(self) -> int | None:
        """Other programs, the desktop and the driver's own reserve."""
        if self.used_bytes is None or self.process_bytes is None:
            return None
        return max(0, self.used_bytes - self.process_bytes)


@dataclass(frozen=True)
class RamView:
    total_bytes: int
    available_bytes: int
    process_bytes: int
    planned_host_bytes: int | None

    @property
    def others_bytes(self) -> int:
        return max(0, self.total_bytes - self.available_bytes - self.process_bytes)


@dataclass(frozen=True)
class MeterReadout:
    """Everything one repaint shows, computed off the widgets so tests can check the numbers."""

    sample: MeterSample
    vram: tuple[VramView, ...]
    ram: RamView
    bandwidth: BandwidthReading | None  # the last reply's
    spill: SpillSummary | None
    assessment: SpillAssessment
    plan_threads: int | None  # the plan's generation threads, to compare with the process's
    planned_decode_tps: float | None
    # Shared GPU memory above its lowest since the meters started, once past the spill threshold:
    # Windows maps tens of MiB of shared memory for any CUDA process, which is not a spill.
    shared_spilled_bytes: int = 0

    @property
    def memory_controller_pct(self) -> int | None:
        return self.sample.gpus[0].utilization_memory_pct if self.sample.gpus else None


def _planned_for(plan: Plan, gpu_position: int) -> PlannedVram | None:
    """What the plan puts on the local GPU at `gpu_position` (NVML's order; the plan lists RPC
    hosts, which NVML does not see, first)."""
    local = [i for i, g in enumerate(plan.target.gpus) if g.kind != "rpc" and i < len(plan.memory.per_device)]
    if not plan.target.has_gpu or plan.settings.n_gpu_layers <= 0 or gpu_position >= len(local):
        return None
    dev = plan.memory.per_device[local[gpu_position]]
    return PlannedVram(
        weights_bytes=dev.weights_bytes,
        kv_bytes=dev.kv_bytes,
        compute_bytes=dev.compute_bytes + dev.output_bytes,
        margin_bytes=dev.margin_bytes,
    )


class MeterState:
    def __init__(
        self,
        *,
        history_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        platform: str = sys.platform,
    ) -> None:
        self.history_s = history_s
        self._clock = clock
        self._platform = platform
        self._lock = threading.Lock()
        self._plan: Plan | None = None
        self._spill: SpillSummary | None = None
        self._samples: deque[MeterSample] = deque()
        self._decodes: deque[BandwidthReading] = deque()
        self._assessment: SpillAssessment = IDLE
        self._last: MeterReadout | None = None
        # Lowest readings since the meters started, kept beyond the history window: a model that
        # has run spilled for longer than the history must still show the rise.
        self._shared_floor: int | None = None
        self._pcie_floor: int | None = None

    # Inputs
    def set_plan(self, plan: Plan | None) -> None:
        with self._lock:
            self._plan = plan
            self._spill = spill_summary(plan) if plan is not None else None
            self._decodes.clear()  # old speeds belong to the old settings
            self._assessment = IDLE

    @property
    def plan(self) -> Plan | None:
        return self._plan

    def record_decode(
        self,
        decode_tps: float,
        when: float | None = None,
        *,
        context_tokens: int | None = None,
        duration_s: float | None = None,
    ) -> SpillAssessment:
        """A reply finished at `when` (the sampler's clock; default now) generating at `decode_tps`.

        `context_tokens`: tokens in the cache during the reply, so a long chat is not mistaken for a
        spill; `duration_s`: how long it generated, the window whose readings are judged.
        """
        when = self._clock() if when is None else when
        with self._lock:
            plan = self._plan
            if plan is None or decode_tps <= 0:
                return self._assessment
            devices = self._samples[-1].devices if self._samples else ()
            reading = achieved_bandwidth(plan, decode_tps, time_s=when, context_tokens=context_tokens, devices=devices)
            self._decodes.append(reading)
            self._trim(when)
            samples = list(self._samples)
            shared_floor, pcie_floor = self._shared_floor, self._pcie_floor
        window = duration_s if duration_s and duration_s > 0 else DEFAULT_REPLY_WINDOW_S
        # Judged outside the lock: a re-plan suggestion evaluates the memory model a few times.
        result = assess(
            plan,
            decode_tps,
            samples=samples,
            reply_start_s=when - window,
            reply_end_s=when,
            context_tokens=context_tokens,
            shared_floor_bytes=shared_floor,
            pcie_floor_kb_per_s=pcie_floor,
            platform=self._platform,
        )
        with self._lock:
            if self._plan is plan:
                self._assessment = result
        return result

    def update(self, sample: MeterSample) -> MeterReadout:
        with self._lock:
            self._samples.append(sample)
            self._trim(sample.time_s)
            if sample.shared is not None:
                shared = sample.shared.shared_bytes
                self._shared_floor = shared if self._shared_floor is None else min(self._shared_floor, shared)
            pcie = [
                (g.pcie_rx_kb_per_s or 0) + (g.pcie_tx_kb_per_s or 0)
                for g in sample.gpus
                if g.pcie_rx_kb_per_s is not None or g.pcie_tx_kb_per_s is not None
            ]
            if pcie:
                total = sum(pcie)
                self._pcie_floor = total if self._pcie_floor is None else min(self._pcie_floor, total)
            readout = self._readout(sample)
            self._last = readout
            return readout

    def refresh(self) -> MeterReadout | None:
        """Recompute the readout from the latest sample, after set_plan or record_decode."""
        with self._lock:
            if not self._samples:
                return None
            self._last = self._readout(self._samples[-1])
            return self._last

    def _trim(self, now_s: float) -> None:
        cutoff = now_s - self.history_s
        while self._samples and self._samples[0].time_s < cutoff:
            self._samples.popleft()
        while self._decodes and self._decodes[0].time_s < cutoff:
            self._decodes.popleft()

    # Outputs
    def latest(self) -> MeterReadout | None:
        with self._lock:
            return self._last

    def samples(self) -> list[MeterSample]:
        with self._lock:
            return list(self._samples)

    def decode_history(self) -> list[BandwidthReading]:
        with self._lock:
            return list(self._decodes)

    @property
    def assessment(self) -> SpillAssessment:
        return self._assessment

    def _readout(self, sample: MeterSample) -> MeterReadout:
        plan = self._plan
        vram: list[VramView] = []
        for position, g in enumerate(sample.gpus):
            device = sample.device(g.index)
            process = g.process_memory_used_bytes
            source = g.process_memory_source if process is not None else None
            if (
                process is None
                and sample.shared is not None
                and sample.shared.dedicated_bytes is not None
                and len(sample.gpus) == 1
            ):
                # WDDM hides per-process memory from NVML; Windows' own counters have it.
                process, source = sample.shared.dedicated_bytes, "windows counters"
            vram.append(
                VramView(
                    index=g.index,
                    name=device.name if device else f"GPU {g.index}",
                    total_bytes=g.memory_total_bytes,
                    used_bytes=g.memory_used_bytes,
                    free_bytes=g.memory_free_bytes,
                    process_bytes=process,
                    process_source=source,
                    planned=_planned_for(plan, position) if plan is not None else None,
                )
            )
        host = sample.host
        ram = RamView(
            total_bytes=host.ram_total_bytes,
            available_bytes=host.ram_available_bytes,
            process_bytes=host.process_rss_bytes,
            planned_host_bytes=plan.memory.host.total_bytes if plan is not None else None,
        )
        last_decode = self._decodes[-1] if self._decodes else None
        spilled = 0
        if sample.shared is not None and self._shared_floor is not None:
            rise = sample.shared.shared_bytes - self._shared_floor
            spilled = rise if rise >= SHARED_RISE_BYTES else 0
        return MeterReadout(
            sample=sample,
            vram=tuple(vram),
            ram=ram,
            bandwidth=last_decode,
            spill=self._spill,
            assessment=self._assessment,
            plan_threads=plan.settings.n_threads if plan is not None else None,
            planned_decode_tps=expected_decode_tps(plan) if plan is not None else None,
            shared_spilled_bytes=spilled,
        )
