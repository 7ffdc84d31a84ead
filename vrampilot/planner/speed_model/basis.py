"""Where a plan's speed prediction comes from, in one sentence: what was measured, when, and what
is assumed. Every figure the speed model uses is one of: measured by the speed probe on this CPU,
corrected by replies measured here, read from NVML or a GPU profile, or assumed (a constant in
planner/target.py or planner/speed_model/predict.py); the plan says which.
"""

from __future__ import annotations

from vrampilot.gguf import ModelSpec
from vrampilot.planner.settings import Settings
from vrampilot.planner.speed_model.cpu_speed import CpuRates, weight_table
from vrampilot.planner.speed_model.graph_factors import factors_for_model, graph_factors
from vrampilot.planner.speed_model.predict import SpeedPrediction, assumed_bandwidth_share, backend_key
from vrampilot.planner.target import GpuTarget, Target


def device_basis(g: GpuTarget) -> str:
    """Where one device's rates come from: measured here, or its peak and an assumed share."""
    m = g.measured
    if m is not None:
        return (
            f"llama.cpp's kernels measured on this device {m.date} ({m.decode_gbps:.1f} GB/s reading {m.weight_type} "
            f"weights, {m.prefill_gflops:.0f} GFLOP/s on a prompt, {m.product_overhead_us:.0f} us per kernel)"
        )
    return f"{g.bandwidth_gbps:.0f} GB/s ({'assumed' if g.bandwidth_note else 'peak from NVML or its profile'})"


def _calibration(speed: SpeedPrediction) -> str:
    n = speed.calibration_replies
    if not n:
        return "not yet corrected by a measured reply"
    whose = f" of {speed.calibration_model}" if speed.calibration_model else " on this machine"
    return (
        f"corrected by {n} measured repl{'y' if n == 1 else 'ies'}{whose} "
        f"(generating x{speed.decode_factor:.2f}, prompts x{speed.prefill_factor:.2f})"
    )


def speed_basis(spec: ModelSpec, target: Target, settings: Settings, speed: SpeedPrediction) -> str:
    """One sentence for the plan's reasons."""
    parts: list[str] = []
    on_gpu = target.has_gpu and settings.n_gpu_layers > 0
    probe = target.host_probe
    if on_gpu:
        # Each device at its own rates (planner/speed_model/predict.py): each says where its figures came from.
        text = "GPU: " + ", ".join(
            (f"{g.label} " if len(target.gpus) > 1 else "") + device_basis(g) for g in target.gpus
        )
        assumed = [g for g in target.gpus if g.measured is None]
        if assumed:
            shares = "/".join(sorted({f"{assumed_bandwidth_share(g):.0%}" for g in assumed}))
            text += (
                f", of which {shares} is assumed to be reached (not measured on this device: "
                "`vrampilot doctor --measure`; fitted on published llama-bench results, docs/speed-model.md)"
            )
        parts.append(text)
    if not on_gpu or settings.n_gpu_layers <= spec.n_layer:  # layers on the CPU
        if probe is not None:
            note = f"CPU: llama.cpp's kernels measured on this machine {probe.date}, RAM {probe.ram_peak_gbps:.1f} GB/s"
            if probe.busy:
                note += f" ({probe.busy_note()})"
            stand_ins = CpuRates(probe, target.cpu_physical_cores).stand_ins(weight_table(spec).types())
            if stand_ins:
                note += "; " + ", ".join(f"{t} estimated from {s}" for t, s in sorted(stand_ins.items()))
            graph = factors_for_model(spec, probe, target.cpu_physical_cores)
            if graph is not None:
                (dw, da), (pw, pa) = graph.decode(settings.n_threads), graph.prefill(settings.n_threads_batch)
                run = graph_factors(probe, target.cpu_physical_cores)
                one = run.decode(1)[0] if run is not None and run.decode(settings.n_threads)[0] != dw else None
                weights = "weights" if one is None else f"weights; x{one:.2f} at 1 thread is the built-in model's own"
                note += (
                    f"; a run of the built-in model here corrects the kernels' sum by x{dw:.2f} ({weights}) and "
                    f"x{da:.2f} (attention) when generating, x{pw:.2f} and x{pa:.2f} for prompts"
                )
            elif probe.reference is not None:
                note += (
                    "; graph costs beyond the kernels are not counted until the built-in model's weight types "
                    "are measured (with the next model planned)"
                )
            else:
                note += "; the built-in model has not been run here, so graph costs beyond the kernels are not counted"
            parts.append(note)
        else:
            parts.append(
                f"CPU: assumed rates (RAM {target.host_bandwidth_gbps:.0f} GB/s; this machine has not been measured "
                "yet: `vrampilot doctor --measure`)"
            )
    key = backend_key(target, settings)
    return f"Speed basis ({key}): " + "; ".join(parts) + f"; {_calibration(speed)}."
