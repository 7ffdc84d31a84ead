"""The run's one measurement of this machine (`doctor_measure`: `vrampilot doctor --measure`, as
tests/conftest.py `measured_run` runs it once per run), and a data folder where the app measured
this machine at an earlier start: that probe (tests/conftest.py `host_probe`), saved as a
returning user's record.

A window started on a data folder with no record runs the probe on a worker (about 30 s of both
cores' work on a 2-core machine) and stops it when it closes. Tests of something else than the
first start (tests/ui/test_speed_probe.py is that test) start on this record instead, so the probe
neither runs again nor competes with the test for the CPU.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from vrampilot.speed import HostProbe, MachineSpeed


def save_measured_record(home: Path, probe: HostProbe) -> MachineSpeed:
    """Save `probe` as this machine's record in the data folder of VRAMPILOT_HOME=`home`; returns
    the record. Saved as taken on a quiet machine: on a busy one (a shared CI host) the app would
    measure again at every start, and that probe would compete with the test for the CPU."""
    from vrampilot.speed import detect_measured_machine, save_probe

    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    speed = detect_measured_machine().speed  # a record (empty where nothing was saved)
    assert speed is not None
    return save_probe(speed.fingerprint, replace(probe, others_cpu_share=0.0, app_busy=False), data)


@dataclass(frozen=True)
class MeasuredRun:
    """`vrampilot doctor --measure` run once for the whole test run, in a data folder of its own
    (`home`, VRAMPILOT_HOME): what it printed, and the probe it kept there."""

    home: Path
    returncode: int
    stdout: str
    stderr: str
    probe: HostProbe  # the record's probe: every weight type of released files, every cache type
    steps: tuple[str, ...]  # the probe's steps as the command said them, in order


# The probe as a first start on the embedded model keeps it (`host_probe`): the weight types of
# its own file and of a few others, the f16 and q8_0 caches. Tests of what a record lacks (a model
# whose types were not measured, tests/ui/test_speed_controller.py) start from it.
FIRST_START_TYPES = ("q4_0", "q4_1", "q8_0", "f16")
FIRST_START_KV = ("f16", "q8_0")


def doctor_measure(home: Path) -> MeasuredRun:
    """Run `vrampilot doctor --measure` with VRAMPILOT_HOME=`home`, as a user runs it."""
    from tests import waits
    from vrampilot.hardware import detect_machine
    from vrampilot.speed import load_machine_speed, machine_fingerprint

    env = {**os.environ, "VRAMPILOT_HOME": str(home)}
    exe = [sys.executable, "-m", "vrampilot", "doctor"]
    # About 40 s of two threads' work on a quiet 2-core machine, minutes beside other tests.
    r = waits.run([*exe, "--measure"], cpu_s=1200, env=env, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr[-3000:]
    m = detect_machine()
    probe = load_machine_speed(machine_fingerprint(m.cpu, m.ram_total_bytes, m.llama, m.gpus), home / "data").probe
    assert probe is not None, r.stdout
    said = r.stderr.split("\n")
    steps = tuple(line.strip() for line in said if line.startswith("  ") and line.strip())
    return MeasuredRun(home, r.returncode, r.stdout, r.stderr, probe, steps)
