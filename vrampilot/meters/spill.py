"""Spill: what the plan leaves outside VRAM, and noticing when the driver spills the rest.

Two different things, both called spill by users:
- Planned: layers, KV cache or the output layer the plan itself puts in system RAM (partial
  offload). Their bytes are read at system-memory speed each token; `spill_summary` says which and
  what share of a token's bytes that is.
- Unplanned: on Windows the driver's "CUDA - Sysmem Fallback Policy" backs an allocation that did
  not fit with shared system memory. Nothing fails; generation just collapses 3-5x while GPU
  utilisation looks low, because the bus is the limit. `assess` notices it by its signature: the
  measured decode speed well below the plan's while shared GPU memory or PCIe traffic rises, and
  `suggest_replan` picks the cheapest change (q8_0 KV, then less context, then fewer layers: the
  order is planner/search/alternatives.py's) that frees what spilled.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from vrampilot.meters.bandwidth import TokenBytes, expected_decode_tps, token_bytes
from vrampilot.meters.types import MeterSample
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.alternatives import VRAM_FIELDS, freeing_changes, held_pins
from vrampilot.planner.settings import Settings
from vrampilot.units import MIB, format_bytes

# "Well below": a spill costs 3-5x, while noise between replies and the speed model's error stay
# within about +-25%; 60% separates the two with room on both sides.
SLOW_RATIO = 0.6
# Shared usage moves by a few MiB as the driver maps staging buffers; a spill is hundreds.
SHARED_RISE_BYTES = 256 * MIB
# A fully offloaded decode moves kilobytes of activations per token over PCIe; paging weights or
# KV from system memory moves gigabytes per second.
PCIE_RISE_KB_PER_S = 1_000_000
# Without a duration from the engine, a reply is looked at over this many seconds before its stats.
DEFAULT_REPLY_WINDOW_S = 5.0
# When nothing measured says how much spilled, free this much (CUDA context growth, a browser tab).
DEFAULT_DEFICIT_BYTES = 512 * MIB
# Free a little more than the deficit so the next plan does not land on the edge again.
REPLAN_HEADROOM_BYTES = 256 * MIB

SYSMEM_FALLBACK_ADVICE = (
    'In the NVIDIA Control Panel (Manage 3D settings), set "CUDA - Sysmem Fallback Policy" to '
    '"Prefer No Sysmem Fallback": an overflow then fails at load instead of running slowly.'
)


# Planned spill
@dataclass(frozen=True)
class SpillSummary:
    """What this plan keeps in system RAM, and the share of each token's bytes read from there."""

    has_gpu: bool
    n_layer: int
    host_layers: int
    output_on_host: bool
    host_layer_weights_bytes: int
    kv_host_bytes: int
    token: TokenBytes

    @property
    def host_share(self) -> float:
        return self.token.host_share

    def lines(self) -> list[str]:
        if not self.has_gpu:
            return ["CPU-only plan: the whole model is read from system memory."]
        if not self.host_layers and not self.output_on_host and not self.kv_host_bytes:
            return ["Everything the model reads per token is in VRAM (only the token embedding stays on the host)."]
        parts: list[str] = []
        if self.host_layers:
            parts.append(f"{self.host_layers} of {self.n_layer} layers ({format_bytes(self.host_layer_weights_bytes)})")
        if self.kv_host_bytes:
            parts.append(f"{format_bytes(self.kv_host_bytes)} of KV cache")
        if self.output_on_host:
            parts.append("the output layer")
        return [
            "On the host: " + ", ".join(parts) + ".",
            f"{self.host_share:.0%} of each token's bytes are read from system memory.",
        ]


def spill_summary(plan: Plan) -> SpillSummary:
    mem, spec = plan.memory, plan.spec
    has_gpu = plan.target.has_gpu and plan.settings.n_gpu_layers > 0
    host_layers = [i for i, on in enumerate(mem.gpu_layers) if not on] if has_gpu else list(range(spec.n_layer))
    return SpillSummary(
        has_gpu=has_gpu,
        n_layer=spec.n_layer,
        host_layers=len(host_layers),
        output_on_host=has_gpu and not mem.output_on_gpu,
        host_layer_weights_bytes=sum(spec.layer_weight_bytes[i] for i in host_layers),
        kv_host_bytes=mem.host.kv_bytes if has_gpu else 0,
        token=token_bytes(plan),
    )


# Unplanned spill
@dataclass(frozen=True)
class SpillEvidence:
    """What the readings around one reply say. None: not readable on this machine."""

    shared_bytes: int | None
    shared_rise_bytes: int | None  # above the lowest since the plan was loaded
    pcie_kb_per_s: int | None  # RX + TX over all GPUs, median during the reply
    pcie_rise_kb_per_s: int | None  # above the quietest reading since the plan was loaded
    vram_free_bytes: int | None
    temperature_c: int | None
    clock_graphics_mhz: int | None

    @property
    def shared_rising(self) -> bool:
        return self.shared_rise_bytes is not None and self.shared_rise_bytes >= SHARED_RISE_BYTES

    @property
    def pcie_rising(self) -> bool:
        return self.pcie_rise_kb_per_s is not None and self.pcie_rise_kb_per_s >= PCIE_RISE_KB_PER_S


def _pcie(sample: MeterSample) -> int | None:
    values = [
        (g.pcie_rx_kb_per_s or 0) + (g.pcie_tx_kb_per_s or 0)
        for g in sample.gpus
        if g.pcie_rx_kb_per_s is not None or g.pcie_tx_kb_per_s is not None
    ]
    return sum(values) if values else None


def spill_evidence(
    samples: Sequence[MeterSample],
    start_s: float,
    end_s: float,
    *,
    shared_floor_bytes: int | None = None,
    pcie_floor_kb_per_s: int | None = None,
) -> SpillEvidence:
    """Evidence during [start_s, end_s] against a baseline: the floors given (the lowest readings
    since the meters started, kept by MeterState beyond the history) or the lowest in `samples`.

    A rise, not a level: Windows maps some shared memory for every CUDA process, and PCIe is busy
    while weights upload at load. Medians, not peaks: NVML's PCIe counter is a ~20 ms window and
    jumps; a spill keeps it up.
    """
    window = [s for s in samples if start_s <= s.time_s <= end_s]
    if not window:
        before = [s for s in samples if s.time_s <= end_s]
        window = before[-1:] or list(samples[-1:])
    pcie_all = [v for v in map(_pcie, samples) if v is not None]
    pcie_now = [v for v in map(_pcie, window) if v is not None]
    shared_all = [s.shared.shared_bytes for s in samples if s.shared is not None]
    shared_now = [s.shared.shared_bytes for s in window if s.shared is not None]
    last = window[-1] if window else None
    gpu = last.gpus[0] if last and last.gpus else None
    pcie = int(statistics.median(pcie_now)) if pcie_now else None
    shared_floor = min([*shared_all, *([shared_floor_bytes] if shared_floor_bytes is not None else [])], default=None)
    pcie_floor = min([*pcie_all, *([pcie_floor_kb_per_s] if pcie_floor_kb_per_s is not None else [])], default=None)
    return SpillEvidence(
        shared_bytes=max(shared_now) if shared_now else None,
        shared_rise_bytes=max(shared_now) - shared_floor if shared_now and shared_floor is not None else None,
        pcie_kb_per_s=pcie,
        pcie_rise_kb_per_s=pcie - pcie_floor if pcie is not None and pcie_floor is not None else None,
        vram_free_bytes=gpu.memory_free_bytes if gpu else None,
        temperature_c=gpu.temperature_c if gpu else None,
        clock_graphics_mhz=gpu.clock_graphics_mhz if gpu else None,
    )


@dataclass(frozen=True)
class Replan:
    """A one-click change: apply `pins` (the plan's own pins plus the change) and plan again."""

    pins: Pins
    label: str
    frees_bytes: int


def _device_total(plan: Plan, settings: Settings) -> int:
    return memory_breakdown(plan.spec, settings, plan.target).device.total_bytes


def suggest_replan(plan: Plan, deficit_bytes: int) -> Replan | None:
    """The least costly change that frees `deficit_bytes` plus headroom of VRAM, or None.

    The plan's settings stay pinned where they decide VRAM: left free, the planner would spend
    what the change frees on a larger ubatch or more layers (its budget still believes the VRAM
    is there), and the spill would come back.
    """
    if not (plan.target.has_gpu and plan.settings.n_gpu_layers > 0):
        return None
    need = deficit_bytes + REPLAN_HEADROOM_BYTES
    now = plan.memory.device.total_bytes
    moe_layers = plan.spec.n_layer if plan.spec.layer_expert_bytes else 0
    for label, changes in freeing_changes(plan.settings, moe_layers):
        frees = now - _device_total(plan, plan.settings.with_(**changes))
        if frees >= need:
            return Replan(held_pins(plan.pins, plan.settings, VRAM_FIELDS, changes), label, frees)
    return None


@dataclass(frozen=True)
class SpillAssessment:
    """level: "idle" (no recent reply to judge), "ok", "slow" (slow without spill signs), "spill"."""

    level: str
    text: str
    measured_tps: float | None = None
    expected_tps: float | None = None
    evidence: SpillEvidence | None = None
    replan: Replan | None = None

    @property
    def warning(self) -> bool:
        return self.level in ("spill", "slow")

    @property
    def title(self) -> str:
        """A few words for the head of the warning box and the status bar's tooltip."""
        return {
            "idle": "Spill check",
            "ok": "No spill",
            "slow": "Slower than planned",
            "spill": "Spilled out of VRAM",
        }.get(self.level, self.level)


IDLE = SpillAssessment("idle", "No reply measured yet: the spill check runs after each reply.")


def estimate_deficit(plan: Plan, evidence: SpillEvidence, sample: MeterSample | None) -> int:
    """How much VRAM went missing: what spilled to shared memory when Windows says, else the plan's
    device total against what other programs leave free now."""
    if evidence.shared_rising and evidence.shared_rise_bytes is not None:
        return evidence.shared_rise_bytes
    if sample is not None and sample.gpus:
        g = sample.gpus[0]
        if g.memory_total_bytes and g.memory_used_bytes is not None and g.process_memory_used_bytes is not None:
            others = max(0, g.memory_used_bytes - g.process_memory_used_bytes)
            over = plan.memory.device.total_bytes - (g.memory_total_bytes - others)
            if over > 0:
                return over
    return DEFAULT_DEFICIT_BYTES


def assess(
    plan: Plan,
    measured_tps: float,
    *,
    samples: Sequence[MeterSample],
    reply_start_s: float,
    reply_end_s: float,
    context_tokens: int | None = None,
    shared_floor_bytes: int | None = None,
    pcie_floor_kb_per_s: int | None = None,
    platform: str = sys.platform,
) -> SpillAssessment:
    """Judge one reply's measured speed against the plan, with the readings taken during it."""
    expected = expected_decode_tps(plan, context_tokens)
    if not (plan.target.has_gpu and plan.settings.n_gpu_layers > 0) or expected <= 0:
        return SpillAssessment("ok", "CPU-only plan: nothing can spill out of VRAM.", measured_tps, expected)
    evidence = spill_evidence(
        samples,
        reply_start_s,
        reply_end_s,
        shared_floor_bytes=shared_floor_bytes,
        pcie_floor_kb_per_s=pcie_floor_kb_per_s,
    )
    integrated = all(g.kind == "igpu" for g in plan.target.gpus)
    if integrated:
        # An integrated GPU's memory is Windows' shared GPU memory: loading the model fills it, so
        # its rise is the plan, not a spill (the counters cannot tell the adapters' apart here).
        evidence = replace(evidence, shared_bytes=None, shared_rise_bytes=None)
    ratio = measured_tps / expected
    speed = f"Generation ran at {measured_tps:.1f} tokens/s, {ratio:.0%} of the planned {expected:.1f}"
    if ratio >= SLOW_RATIO:
        return SpillAssessment("ok", speed + ": as planned.", measured_tps, expected, evidence)
    if not (evidence.shared_rising or evidence.pcie_rising):
        cause = "another program may be using the GPU, or the card is throttling"
        state = []
        if evidence.temperature_c is not None:
            state.append(f"{evidence.temperature_c} °C")
        if evidence.clock_graphics_mhz is not None:
            state.append(f"{evidence.clock_graphics_mhz} MHz")
        if state:
            cause += f" (now {', '.join(state)})"
        if integrated:
            seen = "the integrated GPU's memory is system RAM, so nothing spills out of VRAM"
        elif samples and samples[-1].gpus:
            seen = "shared GPU memory and PCIe traffic show no spill"
        else:
            seen = "the GPU cannot be read here, so a spill cannot be confirmed"
        return SpillAssessment("slow", f"{speed}, but {seen}: {cause}.", measured_tps, expected, evidence)
    signs = []
    if evidence.shared_rising and evidence.shared_rise_bytes is not None:
        signs.append(f"shared GPU memory grew by {format_bytes(evidence.shared_rise_bytes)}")
    if evidence.pcie_rising and evidence.pcie_kb_per_s is not None:
        signs.append(f"PCIe carries {evidence.pcie_kb_per_s / 1e6:.1f} GB/s")
    last = samples[-1] if samples else None
    replan = suggest_replan(plan, estimate_deficit(plan, evidence, last))
    text = (
        f"{speed}, while {' and '.join(signs)}: the model has most likely spilled out of VRAM, and the "
        "GPU now reads weights or KV cache from system memory over the bus. "
        "Free VRAM with a q8_0 KV cache, a smaller context or fewer GPU layers"
        + (
            f" (suggested: {replan.label}, frees {format_bytes(replan.frees_bytes)})."
            if replan
            else "; no such change frees enough here, so a smaller quantization of the model is needed."
        )
    )
    if platform == "win32" or evidence.shared_rising:
        text += " " + SYSMEM_FALLBACK_ADVICE
    return SpillAssessment("spill", text, measured_tps, expected, evidence, replan)
