"""Reading what this machine measured: the one way the front ends get the record.

Detection (vrampilot.hardware) finds what the machine has and reads nothing that was measured;
`with_measured_speed` adds this machine's record (the speed probe's figures and what replies
taught, speed/store.py) to the detected machine, for the planner to predict from.
"""

from __future__ import annotations

from dataclasses import replace

from vrampilot.hardware.types import Machine
from vrampilot.speed.store import load_machine_speed, machine_fingerprint


def with_measured_speed(machine: Machine) -> Machine:
    """`machine` with what was measured on it before (the speed probe's figures and the factors
    replies taught, from its record in the data folder; an empty record when nothing was)."""
    fingerprint = machine_fingerprint(machine.cpu, machine.ram_total_bytes, machine.llama, machine.gpus)
    return replace(machine, speed=load_machine_speed(fingerprint))
