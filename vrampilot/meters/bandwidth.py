"""Achieved memory bandwidth during decoding, from the plan's bytes per token and measured tokens/s.

Decoding is memory-bound: every token reads each active weight once plus the KV cache in use
(planner.md). The plan knows how many of those bytes sit in VRAM and how many in system RAM, so
    achieved GB/s = bytes read per token x measured tokens/s
for each side. Both sides share one token time, so with partial offload each figure is an average
over the whole token, including the part spent waiting on the other side; that is the honest
number to set against the peak, because it is what the user gets.

GB/s here is 10^9 bytes per second, the unit memory bandwidth is quoted in (RTX 4090: 1008 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.hardware import GpuInfo
from vrampilot.planner.plan import Plan
from vrampilot.planner.speed_model.predict import kv_read_bytes  # the speed model's own KV term

GB = 1e9


@dataclass(frozen=True)
class TokenBytes:
    """Bytes read per generated token, by where they sit."""

    device_bytes: int
    host_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.device_bytes + self.host_bytes

    @property
    def host_share(self) -> float:
        """Share of a token's bytes read from system memory (over PCIe or by the CPU)."""
        return self.host_bytes / self.total_bytes if self.total_bytes else 0.0


def _has_gpu(plan: Plan) -> bool:
    return plan.target.has_gpu and plan.settings.n_gpu_layers > 0


def token_bytes(plan: Plan, context_tokens: int | None = None) -> TokenBytes:
    """Bytes per token with `context_tokens` already in the cache (None: the start of a chat).

    The plan's figure is for the first token; a long conversation reads more KV cache per token,
    and without this a filling context would look like lost bandwidth and a false spill.
    """
    dev = plan.speed.device_bytes_per_token
    host = plan.speed.host_bytes_per_token
    if not context_tokens or context_tokens <= 1:
        return TokenBytes(dev, host)
    gpu = _has_gpu(plan)
    mem, spec = plan.memory, plan.spec
    n = min(context_tokens, plan.settings.n_ctx)
    if gpu:
        dev += int(kv_read_bytes(mem, spec, n, on_gpu=True) - kv_read_bytes(mem, spec, 1, on_gpu=True))
    host += int(kv_read_bytes(mem, spec, n, on_gpu=False) - kv_read_bytes(mem, spec, 1, on_gpu=False))
    return TokenBytes(dev, host)


def expected_decode_tps(plan: Plan, context_tokens: int | None = None) -> float:
    """The plan's decode speed at this context fill.

    Time per token grows with the KV bytes read, between the plan's two predictions (empty and full
    context); interpolating by bytes follows sliding-window layers that stop growing, too.
    """
    start, full = plan.speed.decode_tps, plan.speed.decode_tps_full_ctx
    if start <= 0:
        return 0.0
    if not context_tokens or context_tokens <= 1 or full <= 0 or full >= start:
        return start
    b0 = token_bytes(plan).total_bytes
    bn = token_bytes(plan, context_tokens).total_bytes
    bfull = token_bytes(plan, plan.settings.n_ctx).total_bytes
    if bfull <= b0:
        return start
    t0, tfull = 1.0 / start, 1.0 / full
    return 1.0 / (t0 + (tfull - t0) * (bn - b0) / (bfull - b0))


@dataclass(frozen=True)
class Peak:
    gbps: float
    source: str  # "nvml" (bus width x clock), "profile", "plan" (the target's assumption)


def device_peak(plan: Plan | None, devices: tuple[GpuInfo, ...]) -> Peak | None:
    """The card's peak bandwidth: NVML's bus width and clock (or its profile) for a one-GPU plan.

    With several GPUs the layers run one after another, so the target's share-weighted figure is
    the comparable peak; without a plan, the first detected GPU's.
    """
    n_plan_gpus = len(plan.target.gpus) if plan is not None else 0
    if n_plan_gpus <= 1:
        for d in devices:
            if d.peak_bandwidth_gbps:
                return Peak(d.peak_bandwidth_gbps, d.bandwidth_source)
    if plan is not None and plan.target.has_gpu:
        return Peak(plan.target.device_bandwidth_gbps, "plan")
    return None


@dataclass(frozen=True)
class BandwidthReading:
    """Achieved bandwidth for one measured decode speed."""

    time_s: float
    decode_tps: float
    context_tokens: int | None
    device_bytes_per_token: int
    host_bytes_per_token: int
    device_peak_gbps: float | None
    device_peak_source: str | None
    host_peak_gbps: float | None
    # "measured 2026-12-01" (the speed probe's RAM read rate on this machine) or "assumed".
    host_peak_source: str = "assumed"

    @property
    def device_gbps(self) -> float:
        return self.device_bytes_per_token * self.decode_tps / GB

    @property
    def host_gbps(self) -> float:
        return self.host_bytes_per_token * self.decode_tps / GB

    @property
    def device_share_of_peak(self) -> float | None:
        return self.device_gbps / self.device_peak_gbps if self.device_peak_gbps else None

    @property
    def host_share_of_peak(self) -> float | None:
        return self.host_gbps / self.host_peak_gbps if self.host_peak_gbps else None


def achieved_bandwidth(
    plan: Plan,
    decode_tps: float,
    *,
    time_s: float,
    context_tokens: int | None = None,
    devices: tuple[GpuInfo, ...] = (),
) -> BandwidthReading:
    tb = token_bytes(plan, context_tokens)
    peak = device_peak(plan, devices) if _has_gpu(plan) else None
    return BandwidthReading(
        time_s=time_s,
        decode_tps=decode_tps,
        context_tokens=context_tokens,
        device_bytes_per_token=tb.device_bytes,
        host_bytes_per_token=tb.host_bytes,
        device_peak_gbps=peak.gbps if peak else None,
        device_peak_source=peak.source if peak else None,
        host_peak_gbps=plan.target.host_bandwidth_gbps or None,
        host_peak_source=plan.target.host_bandwidth_source,
    )
