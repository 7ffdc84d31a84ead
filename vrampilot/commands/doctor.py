"""`vrampilot doctor [--measure] [--json]`: what this machine has, as the planner will use it.

`--measure` runs the speed probe now, for every weight type of released GGUF files (a minute or so
at a quiet moment, the built-in model's run included; minutes beside other work),
saying each step as it starts, and keeps its figures for this machine; the app's first start runs
a shorter one. `--measure gpus` times only the GPUs' kernels (after a driver update, a
new card), keeping the CPU's figures. What the built-in model's run teaches the speed model (planner/
graph_factors.py) is shown beside the probe's figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from vrampilot.errors import UserError
from vrampilot.hardware import LlamaDevice, Machine, card_devices, format_machine, machine_to_dict
from vrampilot.planner.learned_factors import LearnedFactors
from vrampilot.planner.speed_model.cpu_speed import GraphFactors
from vrampilot.speed import (
    MachineSpeed,
    MeasuredMachine,
    RateAt,
    detect_measured_machine,
    format_speed,
    probe_time_text,
    speed_to_dict,
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="show GPUs (NVML), CPU, RAM, the llama.cpp build and measured speed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--measure",
        nargs="?",
        const="all",
        choices=("all", "gpus"),
        help="measure this machine's speed now (llama.cpp's kernels per weight and cache type, RAM bandwidth); "
        "`--measure gpus`: only the GPUs', keeping the CPU's figures",
    )
    p.set_defaults(handler=run)


def measure(found: MeasuredMachine, what: str = "all", *, say: bool = False) -> MachineSpeed:
    """Run the probe for every weight type (`what` "all") or only the GPUs' ("gpus") and store it;
    returns the machine's record with the new figures. `say`: a line on stderr as it starts."""
    from vrampilot.llamacpp import GgmlError
    from vrampilot.speed import ALL_WEIGHT_TYPES, save_taken, take_probe

    machine, record = found.machine, found.speed
    assert record is not None  # detect_measured_machine always gives a record
    devices = card_devices(machine.llama, machine.gpus)  # each backend's device of every card
    if what == "gpus":
        if not devices:
            raise UserError(
                "no GPU that llama.cpp offloads to here: nothing to measure (`vrampilot doctor` lists the devices)"
            )
        if say:
            print(f"Measuring {', '.join(d.name for d in devices)} (llama.cpp's kernels)…", file=sys.stderr, flush=True)
        return _measure_devices(record, devices)
    if say:
        print(
            f"Measuring this machine (llama.cpp's kernels and the built-in model: {probe_time_text(record.probe)})…",
            file=sys.stderr,
            flush=True,
        )
    try:
        # Each step on a line of its own as it starts: the whole takes from half a minute to
        # minutes, and a user watching a silent terminal cannot tell a busy machine from a hang.
        taken = take_probe(machine, ALL_WEIGHT_TYPES, progress=_say_step if say else None)
    except (GgmlError, ImportError, OSError, AttributeError) as exc:
        raise UserError(f"cannot measure this machine: llama.cpp's kernels did not run ({exc})") from None
    probed = save_taken(record, taken)
    speed = probed.speed
    if speed.probe is not None and probed.kept_earlier:
        print(
            f"The machine was busy ({taken.busy_cause()}): kept the measurement of {speed.probe.date}, "
            "taken at a quiet moment",
            file=sys.stderr,
        )
    return _measure_devices(speed, devices) if devices else speed


def _say_step(what: str) -> None:
    print(f"  {what}", file=sys.stderr, flush=True)


def _measure_devices(speed: MachineSpeed, devices: Sequence[LlamaDevice]) -> MachineSpeed:
    from vrampilot.llamacpp import GgmlError
    from vrampilot.speed import measure_devices_and_save

    try:
        return measure_devices_and_save(speed, devices)
    except (GgmlError, OSError) as exc:
        raise UserError(f"cannot measure {devices[0].name}: llama.cpp's kernels did not run there ({exc})") from None


def run(args: argparse.Namespace) -> int:
    found = detect_measured_machine()
    machine, speed = found.machine, found.speed
    if args.measure:
        speed = measure(found, args.measure, say=not args.json)
    graph = _graph_factors(machine, speed)
    if args.json:
        d = machine_to_dict(machine)
        d["speed"] = speed_to_dict(speed)
        if speed is not None and d["speed"] is not None:
            for entry, f in zip(d["speed"]["factors"], _windows(speed), strict=True):
                entry.update(decode=round(f.decode, 4), prefill=round(f.prefill, 4))
            d["speed"]["graph_factors"] = graph and {
                k: [{"threads": r.threads, "value": r.value} for r in getattr(graph, k)]
                for k in ("decode_base", "decode_attention", "prefill_base", "prefill_attention")
            }
        print(json.dumps(d, indent=2))
    else:
        print(format_machine(machine))
        lines = format_speed(machine, speed, _learned_lines(speed))
        if graph is not None:
            # After the probe's lines, before what replies taught.
            at = next((i for i, line in enumerate(lines) if line.startswith("  learned from")), len(lines))
            lines.insert(at, _graph_line(graph))
        print("\n".join(lines))
    return 0


def _windows(speed: MachineSpeed) -> list[LearnedFactors]:
    """Each window of what replies taught, as predictions apply it."""
    from vrampilot.planner.learned_factors import window_factors

    return [window_factors(speed, stored) for stored in speed.factors]


def _learned_lines(speed: MachineSpeed | None) -> list[str]:
    return [
        f"  learned from {f.n_replies} repl{'y' if f.n_replies == 1 else 'ies'}"
        f"{f' of {f.model}' if f.model else ''} on {f.backend}: "
        f"generating x{f.decode:.2f}, prompts x{f.prefill:.2f}"
        for f in (_windows(speed) if speed is not None else [])
    ]


def _graph_factors(machine: Machine, speed: MachineSpeed | None) -> GraphFactors | None:
    from vrampilot.planner.speed_model.graph_factors import graph_factors

    probe = speed.probe if speed is not None else None
    return graph_factors(probe, machine.cpu.physical_cores)


def _graph_line(g: GraphFactors) -> str:
    def pair(rates: tuple[RateAt, ...]) -> str:
        return " / ".join(f"x{r.value:.2f}" for r in sorted(rates, key=lambda r: r.threads))

    return (
        f"  graph costs beyond the kernels (learned from that run): generating {pair(g.decode_base)} on weights "
        f"(other models x1 at 1 thread), {pair(g.decode_attention)} on attention; prompts {pair(g.prefill_base)}, "
        f"{pair(g.prefill_attention)}"
    )
