"""Measuring this machine and reading what was measured: the one sequence every front end runs.

Detection (vrampilot.hardware) reads nothing that was measured, and a `Machine` holds nothing
measured: `detect_measured_machine` pairs the detected machine with its record (`MeasuredMachine`),
and the planner's `resolve_target` makes a Target of the two. The window (ui/plan/speed_controller.py,
on its workers), `vrampilot doctor --measure`, `vrampilot plan` and bench/speed.py measure through
here: the probe, then its save (which keeps a quieter earlier measurement over one taken while the
machine was busy, speed/store.py `kept_quieter`), the offload devices, and kernels for weight types
a model adds.
Each caller keeps only its own presentation: signals and threads, printed lines, ratios. Nothing
here catches the kernels' errors for a caller, except where a measurement is optional
(`with_devices_measured`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from vrampilot.hardware import LlamaDevice, Machine, card_devices, detect_machine
from vrampilot.speed.device_probe import measure_devices
from vrampilot.speed.host_probe import ProgressFn, measure_host, measure_kernels, missing_kernels
from vrampilot.speed.measured import HostProbe, MachineSpeed
from vrampilot.speed.store import add_kernels, load_machine_speed, machine_fingerprint, save_device_rates, save_probe

_log = logging.getLogger("vrampilot.speed.service")


@dataclass(frozen=True)
class MeasuredMachine:
    """A detected machine and what was measured on it: what every front end plans for (the CLI's
    commands, the window, the hub's badges), handed to the planner's `resolve_target` as its two
    parts. `speed` None: nothing was loaded (a machine described by hand, as the tests' are), so
    the planner's host rates are assumed and nothing is measured or learned."""

    machine: Machine
    speed: MachineSpeed | None = None


def with_measured_speed(machine: Machine) -> MeasuredMachine:
    """`machine` with what was measured on it before (the speed probe's figures and the factors
    replies taught, from its record in the data folder; an empty record when nothing was)."""
    fingerprint = machine_fingerprint(machine.cpu, machine.ram_total_bytes, machine.llama, machine.gpus)
    return MeasuredMachine(machine, load_machine_speed(fingerprint))


def detect_measured_machine() -> MeasuredMachine:
    """This machine as detected, with what was measured on it."""
    return with_measured_speed(detect_machine())


@dataclass(frozen=True)
class Probed:
    """One run of the probe and the record as saved after it."""

    taken: HostProbe  # what this run measured
    speed: MachineSpeed  # the machine's record now

    @property
    def kept_earlier(self) -> bool:
        """Whether the record kept its earlier, quieter measurement over `taken` (taken while the
        machine was busy)."""
        stored = self.speed.probe
        return stored is not None and stored.measured_at != self.taken.measured_at


def take_probe(
    machine: Machine,
    weight_types: Sequence[str],
    *,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
) -> HostProbe:
    """Run the speed probe on this machine's CPU (nothing saved); `progress` hears each step as it
    starts. Raises GgmlError when llama.cpp cannot run it, ProbeCancelled when `cancel` is set."""
    return measure_host(
        machine.cpu.physical_cores,
        machine.llama.cpu_variant,
        weight_types=weight_types,
        cancel=cancel,
        progress=progress,
    )


def save_taken(speed: MachineSpeed, taken: HostProbe) -> Probed:
    """Save a probe in the machine's record (`speed`: its record as loaded)."""
    return Probed(taken, save_probe(speed.fingerprint, taken))


def probe_machine(
    machine: Machine,
    speed: MachineSpeed,
    weight_types: Sequence[str],
    *,
    cancel: threading.Event | None = None,
    app_busy: Callable[[], bool] | None = None,
) -> Probed:
    """The probe, then its save in `speed` (the machine's record). `app_busy`, asked once the probe
    has run: whether the app itself used the CPU meanwhile (a reply), which marks the measurement busy."""
    taken = take_probe(machine, weight_types, cancel=cancel)
    if app_busy is not None and app_busy():
        taken = replace(taken, app_busy=True)
    return save_taken(speed, taken)


def unmeasured_devices(machine: Machine, speed: MachineSpeed) -> list[LlamaDevice]:
    """The offload devices `speed` has no rates for (a GPU added, or figures stored before the
    device probe existed): every backend's device of each card (hardware/cards.py), so that a card
    CUDA and Vulkan both drive runs under the one measured faster."""
    devices = card_devices(machine.llama, machine.gpus)
    return [d for d in devices if speed.device(d.name, d.description) is None]


def measure_devices_and_save(speed: MachineSpeed, devices: Sequence[LlamaDevice]) -> MachineSpeed:
    """Time `devices` with llama.cpp's kernels and store their rates. Raises GgmlError or OSError
    when the kernels do not run there."""
    return save_device_rates(speed.fingerprint, measure_devices(devices))


def with_devices_measured(machine: Machine, speed: MachineSpeed) -> MachineSpeed:
    """`speed` with this machine's unmeasured offload devices measured and stored; as it was when
    llama.cpp's kernels do not run there (their rates then stay assumed, and the plan says so)."""
    unmeasured = unmeasured_devices(machine, speed)
    if not unmeasured:
        return speed
    try:
        return measure_devices_and_save(speed, unmeasured)
    except Exception:
        _log.warning("device probe: llama.cpp's kernels did not run on %s", unmeasured[0].name, exc_info=True)
        return speed


def kernels_missing(speed: MachineSpeed | None, weight_types: Sequence[str]) -> list[str]:
    """The weight types among `weight_types` the stored probe did not measure ([] without a probe)."""
    if speed is None or speed.probe is None:
        return []
    return missing_kernels(speed.probe, weight_types)


def add_missing_kernels(machine: Machine, speed: MachineSpeed, missing: Sequence[str]) -> MachineSpeed:
    """Measure the kernels of `missing` weight types (about 0.15 s each) and add them to the record."""
    return add_kernels(speed.fingerprint, measure_kernels(missing, machine.cpu.physical_cores))
