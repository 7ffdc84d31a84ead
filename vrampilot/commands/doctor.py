"""`vrampilot doctor [--measure] [--json]`: what this machine has, as the planner will use it.

`--measure` runs the speed probe now, for every weight type of released GGUF files (about 10 s on
2 cores, the built-in model's run included), and keeps its figures for this machine; the app's first
start runs a shorter one. What the built-in model's run teaches the speed model (planner/
graph_factors.py) is shown beside the probe's figures.
"""

from __future__ import annotations

import argparse
import json
import sys

from vrampilot.errors import UserError
from vrampilot.hardware import detect_machine
from vrampilot.hardware.cards import card_devices
from vrampilot.hardware.report import format_machine, machine_to_dict
from vrampilot.hardware.types import Machine
from vrampilot.planner.cpu_speed import GraphFactors
from vrampilot.speed.measured import RateAt
from vrampilot.speed.report import format_speed, speed_to_dict
from vrampilot.speed.service import with_measured_speed


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="show GPUs (NVML), CPU, RAM, the llama.cpp build and measured speed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--measure",
        action="store_true",
        help="measure this machine's speed now (llama.cpp's kernels per weight and cache type, RAM bandwidth)",
    )
    p.set_defaults(handler=run)


def measure(machine: Machine) -> Machine:
    """Run the probe for every weight type and store it; returns the machine with the new figures."""
    from dataclasses import replace

    from vrampilot.llamacpp.ggml import GgmlError
    from vrampilot.speed.host_probe import ALL_WEIGHT_TYPES
    from vrampilot.speed.service import measure_devices_and_save, save_taken, take_probe

    try:
        taken = take_probe(machine, ALL_WEIGHT_TYPES)
    except (GgmlError, ImportError, OSError, AttributeError) as exc:
        raise UserError(f"cannot measure this machine: llama.cpp's kernels did not run ({exc})") from None
    probed = save_taken(machine, taken)
    speed = probed.speed
    if speed.probe is not None and probed.kept_earlier:
        print(
            f"The machine was busy ({taken.busy_cause()}): kept the measurement of {speed.probe.date}, "
            "taken at a quiet moment",
            file=sys.stderr,
        )
    devices = card_devices(machine.llama, machine.gpus)  # each backend's device of every card
    if devices:
        try:
            speed = measure_devices_and_save(speed, devices)
        except (GgmlError, OSError) as exc:
            raise UserError(
                f"cannot measure {devices[0].name}: llama.cpp's kernels did not run there ({exc})"
            ) from None
    return replace(machine, speed=speed)


def run(args: argparse.Namespace) -> int:
    machine = with_measured_speed(detect_machine())
    if args.measure:
        if not args.json:
            print("Measuring this machine (llama.cpp's kernels, a few seconds)…", file=sys.stderr, flush=True)
        machine = measure(machine)
    graph = _graph_factors(machine)
    if args.json:
        d = machine_to_dict(machine)
        d["speed"] = speed_to_dict(machine.speed)
        if d["speed"] is not None:
            d["speed"]["graph_factors"] = graph and {
                k: [{"threads": r.threads, "value": r.value} for r in getattr(graph, k)]
                for k in ("decode_base", "decode_attention", "prefill_base", "prefill_attention")
            }
        print(json.dumps(d, indent=2))
    else:
        print(format_machine(machine))
        lines = format_speed(machine)
        if graph is not None:
            # After the probe's lines, before what replies taught.
            at = next((i for i, line in enumerate(lines) if line.startswith("  learned from")), len(lines))
            lines.insert(at, _graph_line(graph))
        print("\n".join(lines))
    return 0


def _graph_factors(machine: Machine) -> GraphFactors | None:
    from vrampilot.planner.graph_factors import graph_factors

    probe = machine.speed.probe if machine.speed is not None else None
    return graph_factors(probe, machine.cpu.physical_cores)


def _graph_line(g: GraphFactors) -> str:
    def pair(rates: tuple[RateAt, ...]) -> str:
        return " / ".join(f"x{r.value:.2f}" for r in sorted(rates, key=lambda r: r.threads))

    return (
        f"  graph costs beyond the kernels (learned from that run): generating {pair(g.decode_base)} on weights "
        f"(other models x1 at 1 thread), {pair(g.decode_attention)} on attention; prompts {pair(g.prefill_base)}, "
        f"{pair(g.prefill_attention)}"
    )
