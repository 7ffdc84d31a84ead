"""Measuring the machine once and learning from every reply, in the background.

At the first start on a machine (or when it came from a version before the probe ran the built-in
model) the speed probe runs on a worker while the window is already usable: under a minute at a
quiet moment, minutes while other programs run (speed/report.py `probe_time_text` says so, and the
status line says what it took). When replies showed that the last probe read a slow moment, it is
measured again only at a start where the machine is quiet (other programs' share of the CPU over a
few seconds under `quiet_share`): measuring again beside other work read slow again, took minutes
and ran at every start; the busy measurement stands until then, and the status line says so. A
model whose weight types the probe did not cover gets them measured when it is selected; every llama.cpp reply is
learned from (planner/calibration.py). Each change is saved in this machine's record (through
speed/service.py, as `doctor --measure` and bench/speed.py measure) and reported with `measured`,
which the plan controller applies to its target and plan. No Qt-free logic lives here: it only
schedules the core's functions and says what happened.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from vrampilot.engine import GenerationStats
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.hardware import Machine
from vrampilot.log import describe_error
from vrampilot.planner.calibration import record_reply, reply_pace_ms
from vrampilot.planner.plan import Plan
from vrampilot.planner.speed_model.cpu_speed import weight_table
from vrampilot.planner.speed_model.graph_factors import with_reference_types
from vrampilot.speed import (
    BUSY_SHARE,
    CORE_WEIGHT_TYPES,
    CpuSnapshot,
    HostProbe,
    MachineSpeed,
    MeasuredMachine,
    ProbeCancelled,
    add_missing_kernels,
    cpu_snapshot,
    kernels_missing,
    others_cpu_share,
    probe_machine,
    probe_outdated,
    probe_time_text,
    unmeasured_devices,
    with_devices_measured,
)
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.workers import TaskHandle

_log = logging.getLogger("vrampilot.ui.speed")
QUIET_SAMPLE_S = 3.0  # how long a start watches other programs' CPU use before measuring again


class SpeedController(QObject):
    measured = Signal(object)  # MachineSpeed: after the probe, new kernels or a learned reply
    status = Signal(str)
    # While the probe runs, what it is doing and why (the plan view shows it beside the prediction,
    # which stays on the old or assumed figures until then); "" when it has ended.
    measuring = Signal(str)
    # Other programs' share of all cores under which a start is quiet enough to measure again.
    quiet_share = BUSY_SHARE

    def __init__(self, ctx: AppContext, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.machine: Machine | None = None
        self.speed: MachineSpeed | None = None  # its record (None: a machine described by hand)
        self.probing = False
        self._reply_start: CpuSnapshot | None = None
        self._replied_while_probing = False

    def _apply(self, speed: MachineSpeed) -> None:
        if self.machine is not None:
            self.speed = speed
        self.measured.emit(speed)

    # -- the probe -------------------------------------------------------------------------------
    def machine_ready(self, found: MeasuredMachine, model: Path | None) -> None:
        """Start the probe unless this machine has figures (a fixed test machine has no record)."""
        machine, speed = found.machine, found.speed
        self.machine, self.speed = machine, speed
        measured = speed is not None and speed.probe is not None and not probe_outdated(speed.probe)
        if speed is None or self.probing:
            return
        if measured and not speed.probe_read_slow:
            self._measure_devices(machine, speed)
            return
        slow = speed.probe_pace_share() if measured else None
        self.probing = True
        self._replied_while_probing = self._reply_start is not None
        why = _measuring_why(speed, slow)
        self.measuring.emit(why)
        self.status.emit(why[0].upper() + why[1:])

        quiet_share = self.quiet_share

        def work(task: TaskHandle) -> tuple[MachineSpeed, HostProbe] | float:
            if slow is not None:
                # Again only at a quiet moment: the share others used meanwhile when it is not one.
                start = cpu_snapshot()
                task.cancelled.wait(QUIET_SAMPLE_S)
                others = others_cpu_share(start)
                if others >= quiet_share:
                    return others
            types = with_reference_types(CORE_WEIGHT_TYPES)
            if model is not None:
                try:  # the model about to be planned: its types measured too (header only, ms)
                    types += weight_table(load_model_spec(model)).types()
                except Exception:  # an unreadable model is the plan's problem, not the probe's
                    _log.debug("probe: could not read %s", model, exc_info=True)
            probed = probe_machine(
                machine, speed, types, cancel=task.cancelled, app_busy=lambda: self._replied_while_probing
            )
            saved = probed.speed
            return (saved if task.cancelled.is_set() else with_devices_measured(machine, saved)), probed.taken

        def done(result: tuple[MachineSpeed, HostProbe] | float) -> None:
            self.probing = False
            self.measuring.emit("")
            if isinstance(result, float):
                self.status.emit(_kept_busy_status(speed, result))
                self._measure_devices(machine, speed)
                return
            new, taken = result
            self._apply(new)
            self.status.emit(_measured_status(new, taken, slow))

        def failed(exc: BaseException) -> None:
            self.probing = False
            self.measuring.emit("")
            if isinstance(exc, ProbeCancelled):
                return  # stopped on request: the next start measures
            self.status.emit(f"Could not measure this machine ({describe_error(exc)}): speed predictions stay assumed")

        self.ctx.tasks.submit(work, done=done, failed=failed, key="speed-probe", owner=self)

    def _measure_devices(self, machine: Machine, speed: MachineSpeed) -> None:
        """The GPUs' own rates, where the CPU has its figures and a device has none (a GPU added,
        or figures stored before the device probe existed): a few seconds, then plans re-price."""
        if not unmeasured_devices(machine, speed):
            return
        self.ctx.tasks.submit(
            lambda _task: with_devices_measured(machine, speed),
            done=self._apply,
            failed=lambda exc: _log.warning("device probe: %s", exc),
            key="speed-devices",
            owner=self,
        )

    def model_selected(self, spec: ModelSpec) -> None:
        """Measure the weight types of `spec` the probe lacks (about 0.15 s each), then re-plan."""
        speed = self.speed
        if speed is None or speed.probe is None or self.probing or self.machine is None:
            return
        missing = kernels_missing(speed, with_reference_types(weight_table(spec).types()))
        if not missing:
            return
        machine = self.machine

        def work(_task: TaskHandle) -> MachineSpeed:
            return add_missing_kernels(machine, speed, missing)

        self.ctx.tasks.submit(
            work, done=self._apply, failed=lambda exc: _log.warning("kernels: %s", exc), key="speed-kernels", owner=self
        )

    def shutdown(self) -> None:
        """Stop measuring with the window: the probe stops at its next check and saves nothing (the
        next start measures again); the context's close waits for it."""
        for key in ("speed-probe", "speed-kernels", "speed-devices"):
            self.ctx.tasks.cancel(key)

    # -- replies ---------------------------------------------------------------------------------
    def reply_started(self) -> None:
        self._reply_start = cpu_snapshot()
        if self.probing:
            self._replied_while_probing = True

    def reply_finished(self, plan: Plan | None, stats: GenerationStats | None) -> None:
        """A llama.cpp reply ended: learn from it (`stats` None: it failed or was not measured)."""
        start, self._reply_start = self._reply_start, None
        speed = self.speed
        if self.probing:
            self._replied_while_probing = True
            return  # the probe and the reply shared the CPU: neither measured this machine
        if plan is None or stats is None or speed is None or start is None:
            return
        if plan.settings.drafting:
            # Its decode speed is the drafting's, not the plan's own: it teaches the draft's
            # acceptance (planner/search/draft.py), never the speed model.
            from vrampilot.planner.search.draft import learn_acceptance

            drafted, accepted, tps = stats.draft_tokens, stats.draft_accepted, stats.decode_tps
            self.ctx.tasks.submit(
                lambda _task: learn_acceptance(plan, drafted, accepted, decode_tps=tps),
                failed=lambda exc: _log.warning("learning the draft's acceptance: %s", exc),
                owner=self,
            )
            return
        share = others_cpu_share(start)

        def work(_task: TaskHandle) -> MachineSpeed:
            # The pace gauge right after the reply (about 50 ms, off the GUI thread): a reply read
            # while the machine ran well below its usual pace is not learned from.
            return record_reply(speed, plan, stats.measurement(share, reply_pace_ms(plan)))

        self.ctx.tasks.submit(
            work, done=self._apply, failed=lambda exc: _log.warning("learning from a reply: %s", exc), owner=self
        )


def _measuring_why(speed: MachineSpeed, slow: float | None) -> str:
    """What the probe about to run does, and why this start runs it (`slow`: the last probe's pace
    against replies' usual, when that is the reason)."""
    probe = speed.probe
    if probe is None:
        return f"measuring this machine now, in the background: {probe_time_text(None)}"
    took = f"measuring again now, in the background ({probe_time_text(probe)})"
    if slow is not None:
        return f"{took}: the last measurement ran at {slow:.0%} of this machine's usual pace"
    return f"{took}: the last measurement came from an older version of the app"


def _measured_status(new: MachineSpeed, taken: HostProbe, slow: float | None) -> str:
    """The status line after a probe (`taken`): what it measured, or that the earlier measurement
    still stands because this one ran while the machine was busy (`slow`: why this start
    measured, as in `_measuring_why`)."""
    stored = new.probe
    if stored is not None and stored.measured_at != taken.measured_at:
        return (
            f"Measured this machine in {taken.duration_s:.1f} s while it was busy: kept the measurement of "
            f"{stored.date}, taken at a quiet moment"
        )
    note = f" ({taken.busy_note()})" if taken.busy else ""
    if slow is not None:
        note += f" (measured again: the last measurement ran at {slow:.0%} of this machine's usual pace)"
    return (
        f"Measured this machine in {taken.duration_s:.1f} s: RAM {taken.ram_peak_gbps:.1f} GB/s; "
        f"speed predictions now use llama.cpp's measured kernels{note}"
    )


def _kept_busy_status(speed: MachineSpeed, others: float) -> str:
    """The status line when a start did not measure again: the machine was not quiet."""
    date = speed.probe.date if speed.probe is not None else "?"
    return (
        f"Kept the measurement of {date}: other programs use {others:.0%} of the CPU now, and measuring "
        "beside them would read slow again; it is measured again at a quiet start"
    )
