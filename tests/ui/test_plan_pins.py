"""The Plan panel's rows come from the knob table (planner/knobs.py): each knob with a panel row
has its control, and the full-size sliding-window cache (--swa-full) is one of them: choosing it
pins it, the plan's value shows on it, and "auto" gives it back to the planner."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QLabel
from pytestqt.qtbot import QtBot

from vrampilot.planner.knobs import KNOBS
from vrampilot.planner.plan import Pins
from vrampilot.planner.settings import Settings
from vrampilot.ui.plan.pin_controls import PinControls


def test_each_knob_with_a_row_has_its_control_and_label(qtbot: QtBot) -> None:
    pins = PinControls()
    qtbot.addWidget(pins)
    labels = [w.text() for w in pins.findChildren(QLabel) if w.buddy() is not None]
    assert labels == [k.panel.label for k in KNOBS if k.panel is not None]
    assert "Full SWA cache" in labels


def test_the_full_sliding_window_cache_is_pinned_and_shown(qtbot: QtBot) -> None:
    pins = PinControls()
    qtbot.addWidget(pins)
    box = pins.findChild(QComboBox, "pin_swa_full")
    assert box is not None and [box.itemText(i) for i in range(box.count())] == ["off", "on"]
    pins.show_settings(Settings(n_ctx=4096, swa_full=False), Pins())
    assert box.currentText() == "off" and pins._auto["swa_full"].isChecked()

    with qtbot.waitSignal(pins.pins_changed) as chosen:
        box.setCurrentText("on")
        box.activated.emit(box.currentIndex())
    assert chosen.args[0].swa_full is True and not pins._auto["swa_full"].isChecked()

    pins.show_settings(Settings(n_ctx=4096, swa_full=True), pins.pins())
    assert box.currentText() == "on" and not pins._auto["swa_full"].isChecked()
    with qtbot.waitSignal(pins.pins_changed) as unpinned:
        pins._auto["swa_full"].click()
    assert unpinned.args[0].swa_full is None
