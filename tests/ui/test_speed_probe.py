"""The first start measures the machine in the background; replies then show beside the prediction.

On the real window and the embedded model: with no speed record in the data folder the probe runs
on a worker while the window stays usable (the GUI thread never works longer than MAX_WORK_S at a stretch), the plan is made
again with the measured figures and says so, and after a reply the plan view shows "predicted X,
last measured Y" and the meters the measured RAM peak.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QThreadPool
from pytestqt.qtbot import QtBot

from tests import waits
from tests.ui.conftest import MAX_WORK_S, OpenWindow, StallMeter, open_chat, screenshot, seed_prefs
from vrampilot.paths import data_dir
from vrampilot.speed import SPEED_FILE_NAME, load_machine_speed
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow
from vrampilot.ui.plan.speed_controller import SpeedController

pytestmark = pytest.mark.slow


def test_first_start_measures_in_the_background_and_replies_teach_the_plan(
    open_window: OpenWindow, qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    (data_dir() / SPEED_FILE_NAME).unlink()  # nobody measured this machine yet
    # The probe with one pass of the kernels and one reading of the built-in model, not two: this
    # test's subject is the window around the probe (on a worker, the GUI thread free, the plan made
    # again, the record kept); the passes and readings, through the same measure_host, are the run's
    # `doctor --measure` (tests/conftest.py `measured_run`) and tests/speed's. Two cost this test 62
    # of the suite's CPU-s on two cores; one, about half.
    monkeypatch.setattr("vrampilot.speed.host_probe.KERNEL_PASSES", 1)
    monkeypatch.setattr("vrampilot.speed.host_probe.READINGS", 1)
    seed_prefs(max_tokens=24)
    w: MainWindow = open_window(wait_plan=False)
    meter = StallMeter()
    meter.start()
    speed = w.plans.speed
    qtbot.waitUntil(lambda: speed.probing or (speed.speed is not None and speed.speed.probe is not None), timeout=20000)
    # While it measures, the plan shown (on assumed rates) says so, and the window answers: a new
    # chat opens at once.
    qtbot.waitUntil(lambda: "CPU rates assumed, measuring this machine now" in w.plan_view.speed.text(), timeout=20000)
    chats_before = len(w.chat_list.ids())
    w.chats.new_chat()
    assert w.chats.chat_id is not None or len(w.chat_list.ids()) >= chats_before
    # The probe: about 15 s of two threads' work on a quiet 2-core machine, minutes beside a compile.
    waits.until(
        qtbot, lambda: not speed.probing and speed.speed is not None and speed.speed.probe is not None, cpu_s=1200
    )
    probe = speed.speed.probe  # type: ignore[union-attr]  # the machine has its speed record by now
    assert probe is not None and {"q4_1", "q8_0"} <= {k.type_name for k in probe.kernels}  # the embedded model's
    stored = load_machine_speed(speed.speed.fingerprint)  # type: ignore[union-attr]  # the machine has its speed record by now
    assert stored.probe == probe
    qtbot.waitUntil(lambda: f"CPU measured {probe.date}" in w.plan_view.speed.text(), timeout=20000)
    assert "measuring" not in w.plan_view.speed.text()
    assert any(r.startswith("Speed basis (cpu:") and "measured on this machine" in r for r in w.plans.plan.reasons)  # type: ignore[union-attr]  # the window has planned by now
    meter.stop()
    assert meter.max_work_s < MAX_WORK_S, meter.report()

    # A reply: the plan view shows it beside what was predicted for it.
    view = w.chat_view
    qtbot.keyClicks(view.input, "What is the capital of France?")
    qtbot.keyClick(view.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 2, cpu_s=90)
    stats = w.ctx.store.messages(open_chat(w))[-1].stats
    assert stats is not None
    qtbot.waitUntil(lambda: "Last measured:" in w.plan_view.speed.text(), timeout=20000)
    text = w.plan_view.speed.text()
    assert f"<b>{stats['decode_tps']:.1f}</b> tokens/s generating (predicted" in text
    assert f"reading its {stats['evaluated_tokens']}-token prompt" in text
    # The pace gauge was read after it (off the GUI thread), compared with the probe's reading;
    # a reply set aside says why.
    again = load_machine_speed(stored.fingerprint)
    last = again.last_replies[-1]
    assert last.pace_share is not None and again.paces
    assert (f"not learned from: {last.set_aside}" in text) == bool(last.set_aside)
    # The meters compare the reply's RAM traffic with the measured peak, and say it is measured.
    w.right_tabs.setCurrentWidget(w.meters_panel)
    qtbot.waitUntil(lambda: "measured peak" in w.meters_panel.bandwidth_label.text(), timeout=10000)
    assert f"{probe.ram_peak_gbps:.1f} GB/s measured peak, {probe.date}" in w.meters_panel.bandwidth_label.text()
    screenshot(w, "speed-meters")
    w.right_tabs.setCurrentIndex(0)
    screenshot(w, "speed-plan")


def test_a_probe_read_at_a_slow_moment_is_taken_again_at_the_next_start(
    open_window: OpenWindow, qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's own pace gauge read slower than replies' usual since: its figures were read slow
    too, so the next quiet start measures again and says why beside the prediction, which keeps the old
    figures meanwhile. Closed before it ends, the app keeps the old record (and measures at the
    next start); a finished probe is judged afresh (tests/speed/test_host_probe.py,
    test_a_new_probe_drops_what_replies_taught_the_cpu_but_not_the_gpu)."""
    from dataclasses import replace

    from vrampilot.speed import (
        PROBE_PACE_READINGS,
        MachineSpeed,
        PaceReading,
        RateAt,
        detect_measured_machine,
        update_machine_speed,
    )

    fp = detect_measured_machine().speed.fingerprint  # type: ignore[union-attr]  # the machine has its speed record by now

    def slow(m: MachineSpeed) -> MachineSpeed:
        assert m.probe is not None
        readings = tuple(PaceReading(1, 3.0) for _ in range(PROBE_PACE_READINGS))
        return replace(m, probe=replace(m.probe, pace_ms=(RateAt(1, 4.0),)), paces=readings)

    before = update_machine_speed(fp, slow)
    assert before.probe_read_slow and before.probe_pace_share() == pytest.approx(0.75)
    assert before.probe is not None
    seed_prefs(max_tokens=24)
    # Every start counts as quiet here (a busy one keeps the record: test_window_colours_and_numbers.py).
    monkeypatch.setattr(SpeedController, "quiet_share", 1.01)
    w: MainWindow = open_window(wait_plan=False)
    speed = w.plans.speed
    why = "the last measurement ran at 75% of this machine"
    qtbot.waitUntil(lambda: speed.probing and why in w.plan_view.speed.text(), timeout=20000)
    text = w.plan_view.speed.text()
    assert (
        f"CPU measured {before.probe.date}, measuring again now, in the background (the last measurement took {before.probe.duration_s:.0f} s"
        in text
    )
    screenshot(w, "speed-probe-again")
    w.close()  # the probe stops at its next step; nothing it measured so far is kept
    again = load_machine_speed(fp)
    assert again.probe == before.probe and again.paces == before.paces and again.probe_read_slow


def test_a_window_closed_while_measuring_leaves_no_work_behind(open_window: OpenWindow, qtbot: QtBot) -> None:
    """The probe stops with the window and the context waits for it. A worker still measuring after
    the window was gone (the context waited 5 s; a reading of the built-in model takes longer on a
    busy machine) emitted into freed objects and crashed the process at the next window's start."""
    (data_dir() / SPEED_FILE_NAME).unlink()
    w: MainWindow = open_window(wait_plan=False)
    speed = w.plans.speed
    qtbot.waitUntil(lambda: speed.probing, timeout=20000)
    w.close()
    w.ctx.tasks.shutdown()
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    fp = speed.speed.fingerprint  # type: ignore[union-attr]  # the machine has its speed record by now
    assert load_machine_speed(fp).probe is None  # nothing half-measured was kept
