"""`vrampilot doctor [--json]`: what this machine has, as the planner will use it."""

from __future__ import annotations

import argparse
import json

from vrampilot.hardware import detect_machine
from vrampilot.hardware.report import format_machine, machine_to_dict


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="show GPUs (NVML), CPU, RAM and the llama.cpp build")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    machine = detect_machine()
    if args.json:
        print(json.dumps(machine_to_dict(machine), indent=2))
    else:
        print(format_machine(machine))
    return 0
