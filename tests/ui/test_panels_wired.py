"""The hub and meters panels live in the main window and talk to the rest of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from tests import waits
from tests.ui.conftest import OpenWindow, screenshot
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins


def test_hub_and_meters_tabs_are_there(open_window: OpenWindow) -> None:
    w = open_window()
    assert [w.center_tabs.tabText(i) for i in range(w.center_tabs.count())] == ["Chat", "Hub"]
    assert [w.right_tabs.tabText(i) for i in range(w.right_tabs.count())] == ["Plan", "Meters", "Server", "MCP servers"]
    # The hub badges are computed for the same target the plan uses.
    assert w.hub.controller.target is w.plans.target
    # Without NVML the meters say why the GPU part is empty, and still show RAM.
    assert "NVML" in w.sampler.gpu_status
    w.meters_status.clicked.emit()
    assert w.right_tabs.currentWidget() is w.meters_panel
    w.center_tabs.setCurrentWidget(w.hub)
    screenshot(w, "11-hub-and-meters-tabs")


def test_a_download_from_the_hub_becomes_the_selected_model(
    open_window: OpenWindow, qtbot: QtBot, tmp_path: Path
) -> None:
    w = open_window()
    downloaded = tmp_path / "downloaded.gguf"
    shutil.copy(embedded_model_path(), downloaded)  # type: ignore[arg-type]  # the embedded model is installed here
    w.center_tabs.setCurrentWidget(w.hub)
    w.hub.controller.model_downloaded.emit(str(downloaded))
    # The library refresh and the plan both run in workers; either may finish first.
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.spec.path == downloaded, timeout=20000)
    qtbot.waitUntil(lambda: w.library_view.entry(downloaded) is not None, timeout=20000)
    assert w.center_tabs.currentWidget() is w.chat_view


@pytest.mark.slow
def test_meters_follow_the_loaded_plan_and_replan_reloads(open_window: OpenWindow, qtbot: QtBot) -> None:
    w = open_window()
    w.plans.load()
    waits.until(qtbot, lambda: w.plans.load_result is not None, cpu_s=60)
    assert w.plans.load_result is not None
    assert w.meters_feed.state.plan is w.plans.load_result.plan
    # The meters' re-plan button hands over pins; the window re-plans with them and reloads.
    pins = Pins(n_ctx=2048, type_k="q8_0", type_v="q8_0")
    w.meters_panel.replan_requested.emit(pins)
    qtbot.waitUntil(
        lambda: (
            w.plans.load_result is not None
            and w.plans.load_result.plan.settings.n_ctx == 2048
            and w.plans.load_result.plan.settings.type_k == "q8_0"
        ),
        timeout=60000,
    )
    assert w.plans.load_result is not None
    assert w.meters_feed.state.plan is w.plans.load_result.plan
