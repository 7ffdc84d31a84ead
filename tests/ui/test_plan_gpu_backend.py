"""The Plan panel's GPU backend on a machine whose NVIDIA card an engine with CUDA and Vulkan lists
twice: the hardware summary shows the card once with both devices, the panel offers the choice,
the plan runs CUDA0 by default and Vulkan0 when chosen, the choice is kept in the settings file,
and on a machine without such a card the row stays hidden and a kept choice it cannot take falls
back to the default with a status line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from testkit.dual_backend import nvidia_machine
from tests.ui.conftest import FAST_PINS, heard
from vrampilot.paths import embedded_model_path
from vrampilot.speed import MeasuredMachine
from vrampilot.ui.app_context import AppContext, build_context
from vrampilot.ui.library.controller import LibraryController
from vrampilot.ui.library.view import LibraryView
from vrampilot.ui.plan.controller import PlanController
from vrampilot.ui.plan.hardware_view import HardwareView
from vrampilot.ui.plan.speed_controller import SpeedController
from vrampilot.ui.plan.view import PlanView
from vrampilot.ui.prefs import Prefs


@pytest.fixture
def nvidia_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppContext]:
    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "home"))
    ctx = build_context(machine=MeasuredMachine(nvidia_machine(vulkan_ids=False)))
    model = embedded_model_path()
    assert model is not None
    ctx.prefs.set_pins_for(model, FAST_PINS)
    yield ctx
    ctx.close()


def _controller(qtbot: QtBot, ctx: AppContext) -> PlanController:
    plan_view, library_view, hardware_view = views = PlanView(), LibraryView(), HardwareView()
    for v in views:
        qtbot.addWidget(v)
    library = LibraryController(ctx, library_view)
    return PlanController(ctx, SpeedController(ctx), plan_view, library, hardware_view, confirm=lambda _t, _x: True)


def test_the_card_shows_once_and_the_panel_picks_its_backend(qtbot: QtBot, nvidia_context: AppContext) -> None:
    plans = _controller(qtbot, nvidia_context)
    try:
        with qtbot.waitSignal(plans.plan_shown, timeout=60000):
            plans.start(None)
        summary = plans.hardware_view.text()
        assert summary.count("RTX 4090") == 1 and "(CUDA0, also Vulkan0)" in summary
        view = plans.view
        assert not view.gpu_backend_row.isHidden()
        assert [view.gpu_backend.itemData(i) for i in range(view.gpu_backend.count())] == ["auto", "cuda", "vulkan"]
        assert plans.plan is not None and plans.plan.settings.devices == ("CUDA0",)

        with qtbot.waitSignal(
            plans.plan_shown, timeout=60000, check_params_cb=lambda p: p.settings.devices == ("Vulkan0",)
        ):
            view.gpu_backend.setCurrentIndex(view.gpu_backend.findData("vulkan"))
            view.gpu_backend.activated.emit(view.gpu_backend.currentIndex())
        assert any("pinned by you (--gpu-backend)" in r for r in plans.plan.reasons)
        nvidia_context.prefs.sync()
        assert Prefs().gpu_backend() == "vulkan"  # in the settings file, for the next start
    finally:
        plans.shutdown()


def test_a_kept_backend_this_machine_lacks_falls_back_with_a_line(qtbot: QtBot, app_context: AppContext) -> None:
    app_context.prefs.set_gpu_backend("cuda")
    plans = _controller(qtbot, app_context)
    status = heard(plans.status)
    try:
        with qtbot.waitSignal(plans.plan_shown, timeout=60000):
            plans.start(None)
        assert plans.view.gpu_backend_row.isHidden()  # a CPU machine: nothing to choose
        assert any(s.startswith("--gpu-backend cuda: no GPU here runs under CUDA") for s in status)
        assert plans.plan is not None and plans.plan.settings.devices == ()
    finally:
        plans.shutdown()
