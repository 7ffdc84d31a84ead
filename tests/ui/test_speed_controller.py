"""The speed controller on its own, without the window: a context on this test's own data folder
holding the session's one real probe (tests/ui/conftest.py `home`), real llama.cpp kernels and
a real GGUF file (testkit) with a weight type that probe did not measure."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from testkit.gguf_models import write_model
from tests.ui.conftest import heard
from vrampilot.gguf import load_model_spec
from vrampilot.speed import (
    PROBE_PACE_READINGS,
    MachineSpeed,
    MeasuredMachine,
    PaceReading,
    RateAt,
    detect_measured_machine,
    load_machine_speed,
    missing_kernels,
    update_machine_speed,
)
from vrampilot.ui.app_context import build_context
from vrampilot.ui.plan.speed_controller import SpeedController


def measured_machine() -> MeasuredMachine:
    """This machine with its speed record, as the plan controller hands it over."""
    return detect_measured_machine()


@pytest.fixture
def speed(qtbot: QtBot, home: Path) -> Iterator[SpeedController]:
    ctx = build_context()
    controller = SpeedController(ctx)
    yield controller
    controller.shutdown()
    ctx.close()


def test_a_machine_measured_at_a_quiet_moment_is_not_measured_again(qtbot: QtBot, speed: SpeedController) -> None:
    machine = measured_machine()
    with qtbot.assertNotEmitted(speed.measuring, wait=300):
        speed.machine_ready(machine, None)
    assert not speed.probing and speed.speed == machine.speed


def test_weight_types_the_probe_lacks_are_measured_saved_and_reported(
    qtbot: QtBot, speed: SpeedController, tmp_path: Path
) -> None:
    speed.machine_ready(measured_machine(), None)
    spec = load_model_spec(write_model(tmp_path / "tiny-q5_0.gguf", "llama", weight_type="q5_0"))
    assert speed.speed is not None and speed.speed.probe is not None
    assert "q5_0" in missing_kernels(speed.speed.probe, ["q5_0"])
    with qtbot.waitSignal(speed.measured, timeout=180000) as measured:
        speed.model_selected(spec)
    new: MachineSpeed = measured.args[0]
    assert new.probe is not None and new.probe.kernel("q5_0") is not None
    assert speed.speed == new  # the controller keeps it; the plan controller re-plans with it
    stored = load_machine_speed(new.fingerprint).probe
    assert stored is not None and stored.kernel("q5_0") == new.probe.kernel("q5_0")
    with qtbot.assertNotEmitted(speed.measured, wait=300):
        speed.model_selected(spec)  # nothing left to measure


def test_a_probe_read_at_a_slow_moment_runs_again_says_why_and_stops_on_shutdown(
    qtbot: QtBot, speed: SpeedController
) -> None:
    fp = measured_machine().speed.fingerprint  # type: ignore[union-attr]  # the session's probe made the record

    def slow(m: MachineSpeed) -> MachineSpeed:
        assert m.probe is not None
        readings = tuple(PaceReading(1, 3.0) for _ in range(PROBE_PACE_READINGS))
        return replace(m, probe=replace(m.probe, pace_ms=(RateAt(1, 4.0),)), paces=readings)

    before = update_machine_speed(fp, slow)
    assert before.probe is not None
    measuring, status = heard(speed.measuring), heard(speed.status)
    speed.machine_ready(measured_machine(), None)
    assert speed.probing
    why = (
        f"measuring again now, in the background (the last measurement took {before.probe.duration_s:.0f} s; "
        "longer while other programs run): the last measurement ran at 75%"
    )
    assert measuring[0].startswith(why) and status == [measuring[0][0].upper() + measuring[0][1:]]
    speed.shutdown()  # the window closes: the probe stops at its next check
    speed.ctx.tasks.shutdown()  # and the context's close waits for it
    again = load_machine_speed(fp)
    assert again.probe == before.probe and again.probe_read_slow  # nothing half-measured was kept
