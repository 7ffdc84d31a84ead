"""What this machine measured, as text (`vrampilot doctor`) and data (`vrampilot doctor --json`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vrampilot.hardware import Machine, card_devices
from vrampilot.speed.codec import encode
from vrampilot.speed.measured import HostProbe, KernelRates, MachineSpeed, RateAt


def _pair(rates: tuple[RateAt, ...], fmt: str = "{:.1f}") -> str:
    return " / ".join(fmt.format(r.value) for r in sorted(rates, key=lambda r: r.threads))


def _kernel_line(k: KernelRates) -> str:
    where = " (repacked)" if k.buffer != "CPU" else ""
    moe = f", experts {_pair(k.prefill_moe_gflops, '{:.0f}')}" if k.prefill_moe_gflops else ""
    return (
        f"    {k.type_name + where:<18} generating {_pair(k.decode_gbps)} GB/s (rows of 1024 {_pair(k.decode_short_gbps)}"
        + (f", 512 {_pair(k.decode_shortest_gbps)}" if k.decode_shortest_gbps else "")
        + (f"; +{_pair(k.matvec_overhead_us)} us per product in a chain" if k.matvec_overhead_us else "")
        + ")"
        f", prompts {_pair(k.prefill_gflops, '{:.0f}')} GFLOP/s{moe}"
    )


def probe_time_text(previous: HostProbe | None) -> str:
    """How long a measurement takes, said before it starts: the last one's time where there is one
    (a probe beside a compile took minutes where a quiet one takes well under one)."""
    if previous is None:
        return "under a minute at a quiet moment, minutes while other programs run"
    return f"the last measurement took {previous.duration_s:.0f} s; longer while other programs run"


def format_probe(probe: HostProbe) -> list[str]:
    threads = " / ".join(str(r.threads) for r in sorted(probe.ram_read_gbps, key=lambda r: r.threads))
    when = probe.measured_at.replace("T", " ").replace("+00:00", " UTC")
    lines = [
        f"Speed: measured {when} in {probe.duration_s:.1f} s with llama.cpp's {probe.cpu_variant or 'CPU'} kernels "
        f"(figures for {threads} threads)"
    ]
    if probe.busy:
        lines.append(f"  ! {probe.busy_note()}; `vrampilot doctor --measure` at a quiet moment replaces them")
    lines.append(f"  RAM read {_pair(probe.ram_read_gbps)} GB/s")
    fixed = [probe.fixed_costs(r.threads) for r in sorted(probe.ram_read_gbps, key=lambda r: r.threads)]
    lines.append(
        "  fixed costs of a decode step: "
        + " / ".join(f"{f.step_s * 1e6:.0f}" for f in fixed)
        + " us per step, "
        + " / ".join(f"{f.layer_s * 1e6:.1f}" for f in fixed)
        + " us per layer, "
        + " / ".join(f"{f.vocab_entry_s * 1e9:.1f}" for f in fixed)
        + " ns per logit sampled"
    )
    lines.append("  weights (per type, through llama.cpp's mat-vec and mat-mat kernels):")
    lines += [_kernel_line(k) for k in probe.kernels]
    lines.append("  flash attention (GFLOP/s generating, prompts):")
    for a in probe.attention:
        lines.append(
            f"    {a.kv_type} cache, heads of {a.head_dim}: {_pair(a.decode_gflops)}, {_pair(a.prefill_gflops)}"
        )
    run = probe.reference
    if run is not None:
        shallow, deep = min(d.depth for d in run.decode), max(d.depth for d in run.decode)

        def tps(depth: int) -> str:
            return " / ".join(
                f"{1 / d.step_s:.1f}" for d in sorted(run.decode, key=lambda d: d.threads) if d.depth == depth
            )

        most = max(p.threads for p in run.prefill)
        first = " / ".join(f"{p.n_tokens / p.seconds:.0f}" for p in run.prefill if p.n_past == 0)
        later = [p for p in run.prefill if p.n_past > 0]
        deeper = ""
        if later:
            rates = " / ".join(f"{p.n_tokens / p.seconds:.0f}" for p in later)
            deeper = f", then {rates} after {', '.join(str(p.n_past) for p in later)} cells ({most} threads)"
        lines.append(
            f"  the built-in model ({run.model_name}, {run.kv_type} cache): generating {tps(shallow)} tokens/s near the "
            f"start, {tps(deep)} after {deep} tokens; prompts {first} tokens/s in the first ubatch of {run.n_ubatch}"
            + deeper
        )
    if probe.pace_ms:
        lines.append(
            f"  pace gauge {_pair(probe.pace_ms, '{:.2f}')} ms (read again after each reply: one read well above "
            "its usual is not learned from)"
        )
    return lines


def format_speed(machine: Machine, speed: MachineSpeed | None, learned: Sequence[str] = ()) -> list[str]:
    """The doctor's speed section: the probe and the pace gauge (`speed`, the machine's record),
    `learned` (what replies taught, as the planner applies it: commands/doctor.py) and what stays
    assumed."""
    lines: list[str] = []
    if speed is None or speed.probe is None:
        lines.append(
            "Speed: not measured on this machine yet (planner rates are assumed): `vrampilot doctor --measure`"
        )
    else:
        lines += format_probe(speed.probe)
    if speed is not None:
        for threads in sorted({r.threads for r in speed.paces}):
            usual = speed.usual_pace_ms(threads)
            n = sum(1 for r in speed.paces if r.threads == threads)
            if usual is not None:
                lines.append(
                    f"  pace gauge at {threads} thread{'s' if threads != 1 else ''}: usually {usual:.2f} ms "
                    f"({n} reading{'s' if n != 1 else ''} after replies)"
                )
        share = speed.probe_pace_share()
        if share is not None and speed.probe_read_slow:
            lines.append(
                f"  the probe ran at {share:.0%} of this machine's usual pace (its gauge against the replies'): "
                "measured again at the app's next start, or now with `vrampilot doctor --measure`"
            )
    lines += learned
    for d in card_devices(machine.llama, machine.gpus):
        m = speed.device(d.name, d.description) if speed is not None else None
        if m is None:
            lines.append(
                f"  {d.name} ({d.description}): not measured (peak bandwidth from NVML or a profile, the share "
                "reached assumed): `vrampilot doctor --measure`"
            )
        else:
            lines.append(
                f"  {d.name} ({d.description}) measured {m.date}: {m.decode_gbps:.2f} GB/s reading "
                f"{m.weight_type} weights, {m.prefill_gflops:.1f} GFLOP/s on a prompt, "
                f"{m.product_overhead_us:.0f} us per kernel"
            )
    if machine.gpus and not machine.llama.offload_devices:
        lines.append("  GPU: not measured (peak bandwidth from NVML or a profile; the share reached is assumed)")
    return lines


def speed_to_dict(speed: MachineSpeed | None) -> dict[str, Any] | None:
    """The record as stored, and whether the GPUs were measured (commands/doctor.py adds each
    window's factors as the planner applies them)."""
    if speed is None:
        return None
    d = encode(speed)
    # "measured" once the device probe timed every device listed, else NVML's peak and an assumed share
    d["gpu"] = "measured" if speed.devices else "assumed"
    return d
