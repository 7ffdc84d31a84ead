"""A data folder where the app measured this machine at an earlier start: the session's one real
speed probe (tests/conftest.py `host_probe`), saved as a returning user's record.

A window started on a data folder with no record runs the probe on a worker (about 30 s of both
cores' work on a 2-core machine) and stops it when it closes. Tests of something else than the
first start (tests/ui/test_speed_probe.py is that test) start on this record instead, so the probe
neither runs again nor competes with the test for the CPU.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vrampilot.speed.measured import HostProbe, MachineSpeed


def save_measured_record(home: Path, probe: HostProbe) -> MachineSpeed:
    """Save `probe` as this machine's record in the data folder of VRAMPILOT_HOME=`home`; returns
    the record. Saved as taken on a quiet machine: on a busy one (a shared CI host) the app would
    measure again at every start, and that probe would compete with the test for the CPU."""
    from vrampilot.speed.service import detect_measured_machine
    from vrampilot.speed.store import save_probe

    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    speed = detect_measured_machine().speed  # a record (empty where nothing was saved)
    assert speed is not None
    return save_probe(speed.fingerprint, replace(probe, others_cpu_share=0.0, app_busy=False), data)
