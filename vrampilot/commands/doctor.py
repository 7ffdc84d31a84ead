"""`vrampilot doctor [--measure] [--json]`: what this machine has, as the planner will use it.

`--measure` runs the speed probe now, for every weight type of released GGUF files (about 2-3 s on
2 cores), and keeps its figures for this machine; the app's first start runs a shorter one.
"""

from __future__ import annotations

import argparse
import json
import sys

from vrampilot.errors import UserError
from vrampilot.hardware import detect_machine
from vrampilot.hardware.report import format_machine, machine_to_dict
from vrampilot.hardware.speed_report import format_speed, speed_to_dict
from vrampilot.hardware.types import Machine


def add_parser(sub: argparse._SubParsersAction) -> None:
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

    from vrampilot.hardware.probe import ALL_WEIGHT_TYPES, measure_host
    from vrampilot.hardware.speed_store import save_probe
    from vrampilot.llamacpp.ggml import GgmlError

    assert machine.speed is not None  # detect_machine always gives a record
    try:
        probe = measure_host(machine.cpu.physical_cores, machine.llama.cpu_variant, weight_types=ALL_WEIGHT_TYPES)
    except (GgmlError, ImportError, OSError, AttributeError) as exc:
        raise UserError(f"cannot measure this machine: llama.cpp's kernels did not run ({exc})") from None
    return replace(machine, speed=save_probe(machine.speed.fingerprint, probe))


def run(args: argparse.Namespace) -> int:
    machine = detect_machine()
    if args.measure:
        if not args.json:
            print("Measuring this machine (llama.cpp's kernels, a few seconds)…", file=sys.stderr, flush=True)
        machine = measure(machine)
    if args.json:
        d = machine_to_dict(machine)
        d["speed"] = speed_to_dict(machine.speed)
        print(json.dumps(d, indent=2))
    else:
        print(format_machine(machine))
        print("\n".join(format_speed(machine)))
    return 0
