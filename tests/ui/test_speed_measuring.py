"""What the plan view says while the speed probe runs: why this start measures, and for how long;
and that a start which is not quiet keeps a slow measurement rather than measuring again."""

from __future__ import annotations

from dataclasses import replace

from vrampilot.speed import HostProbe, MachineSpeed
from vrampilot.ui.plan.speed_controller import _measuring_why


def test_each_reason_to_measure_is_said_with_the_last_probe_s_duration(host_probe: HostProbe) -> None:
    probe = replace(host_probe, duration_s=36.4, others_cpu_share=0.0, app_busy=False)
    # What it really takes (issue 58: "under a minute" was said where a busy start took 100 s).
    assert _measuring_why(MachineSpeed("fp"), None) == (
        "measuring this machine now, in the background: under a minute at a quiet moment, minutes while "
        "other programs run"
    )
    again = "measuring again now, in the background (the last measurement took 36 s; longer while other programs run): "
    slow = _measuring_why(MachineSpeed("fp", probe=probe), 0.73)
    assert slow == again + "the last measurement ran at 73% of this machine's usual pace"
    # Not slow: a probe an older version took (measured again, `probe_outdated`); a busy one is not
    # measured again for being busy (speed/host_probe.probe_outdated).
    assert _measuring_why(MachineSpeed("fp", probe=probe), None) == again + (
        "the last measurement came from an older version of the app"
    )
