"""The plan controller on its own, without the window: its three views, a context on this test's
own data folder planning for a fixed CPU machine, real GGUF files (testkit) and the embedded model
loaded by the real engine thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from testkit.gguf_models import write_model, write_renamed
from tests.ui.conftest import FAST_PINS, heard
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.library.controller import LibraryController
from vrampilot.ui.library.view import LibraryView
from vrampilot.ui.plan.controller import LoadState, PlanController
from vrampilot.ui.plan.hardware_view import HardwareView
from vrampilot.ui.plan.speed_controller import SpeedController
from vrampilot.ui.plan.view import PlanView


def load_state_of(plans: PlanController) -> LoadState:
    """The load state as read now (an `assert plans.load_state is X` would let the checker believe
    it stays X across the calls that change it)."""
    return plans.load_state


@pytest.fixture
def plans(qtbot: QtBot, app_context: AppContext) -> Iterator[PlanController]:
    plan_view, library_view, hardware_view = views = PlanView(), LibraryView(), HardwareView()
    for v in views:
        qtbot.addWidget(v)
    library = LibraryController(app_context, library_view)
    controller = PlanController(
        app_context, SpeedController(app_context), plan_view, library, hardware_view, confirm=lambda _t, _x: True
    )
    yield controller
    controller.shutdown()


def start(qtbot: QtBot, plans: PlanController, model: Path | None = None) -> None:
    with qtbot.waitSignal(plans.plan_shown, timeout=20000):
        plans.start(model)


def test_start_plans_the_built_in_model_for_the_fixed_machine(qtbot: QtBot, plans: PlanController) -> None:
    status = heard(plans.status)
    start(qtbot, plans)
    assert plans.ctx.machine is not None and plans.machine is plans.ctx.machine.machine and plans.target is not None
    assert plans.plan is not None and plans.plan.spec.path == embedded_model_path()
    assert plans.plan.fits and plans.load_state is LoadState.UNLOADED
    assert status[0] == "No GPU found: planning for the CPU"
    qtbot.waitUntil(lambda: plans.library.view.entry(embedded_model_path()) is not None, timeout=20000)  # type: ignore[arg-type]  # the embedded model is installed with the app


def test_a_new_file_is_planned_its_pins_kept_and_a_damaged_one_refused(
    qtbot: QtBot, plans: PlanController, tmp_path: Path
) -> None:
    start(qtbot, plans)
    tiny = write_model(tmp_path / "tiny-llama.gguf", "llama")
    shown = heard(plans.plan_shown)
    plans.library.add_models([tiny, tmp_path / "notes.txt"])  # only GGUF files join the library
    qtbot.waitUntil(lambda: bool(shown) and shown[-1].spec.path == tiny, timeout=20000)
    assert plans.model_path == tiny and plans.ctx.library.files() == [tiny]
    qtbot.waitUntil(lambda: plans.library.view.entry(tiny) is not None, timeout=20000)

    with qtbot.waitSignal(plans.plan_shown, timeout=20000, check_params_cb=lambda p: p.settings.n_ctx == 2048):
        plans.set_pins(Pins(n_ctx=2048))
    assert plans.ctx.prefs.pins_for(tiny).n_ctx == 2048  # remembered for this file

    bad = tmp_path / "damaged.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 16)
    with qtbot.waitSignal(plans.model_failed, timeout=20000) as failed:
        plans.library.add_models([bad])
    why = failed.args[0]
    assert why.startswith("Could not read damaged.gguf: ") and why.endswith("; using tiny-llama.gguf instead")
    assert "Traceback" not in why
    assert plans.model_path == tiny and plans.plan is not None and plans.plan.spec.path == tiny

    status = heard(plans.status)
    text = plans.copy_command("bash")
    assert "llama-server" in text and str(tiny) in text and "-c 2048" in text
    assert status == ["Copied the llama-server command for bash (tiny-llama.gguf)"]


def test_load_then_unload_the_built_in_model(qtbot: QtBot, plans: PlanController) -> None:
    start(qtbot, plans)
    states = heard(plans.load_state_changed)
    with qtbot.waitSignal(plans.plan_shown, timeout=20000):
        plans.set_pins(FAST_PINS)
    with qtbot.waitSignal(plans.loaded, timeout=60000) as loaded:
        plans.load()
        assert plans.load_state is LoadState.LOADING
    result = loaded.args[0]
    assert result.plan.spec.path == embedded_model_path() and result.plan.settings.n_ctx == FAST_PINS.n_ctx
    assert load_state_of(plans) is LoadState.LOADED and plans.is_loaded(embedded_model_path())
    assert plans.loaded_is_current()
    with qtbot.waitSignal(plans.unloaded, timeout=20000):
        plans.unload()
    assert states == [LoadState.LOADED, LoadState.UNLOADED] and plans.load_result is None


def test_a_counted_cache_table_is_counted_off_the_gui_thread(
    qtbot: QtBot, plans: PlanController, tmp_path: Path
) -> None:
    """An architecture the cache formula is not verified on gets its cache by part from llama.cpp's
    dry runs, one per context: the panel says it is counting and the table arrives from a task."""
    routed = write_renamed(tmp_path / "nanbeige.gguf", "llama", "nanbeige")
    start(qtbot, plans, routed)
    view = plans.view
    with qtbot.waitSignal(view.cache_count_requested, timeout=5000):
        view.cache_toggle.setChecked(True)
    assert view.cache_table.text() == "Counting the cache with llama.cpp…"
    qtbot.waitUntil(lambda: "counted by llama.cpp" in view.cache_table.text(), timeout=60000)


def test_the_tools_tokens_reach_every_plan_but_are_not_remembered_per_model(
    qtbot: QtBot, plans: PlanController
) -> None:
    start(qtbot, plans)
    with qtbot.waitSignal(plans.plan_shown, timeout=20000, check_params_cb=lambda p: p.pins.tools_tokens == 3000):
        plans.set_tools_tokens(3000)
    assert plans.plan is not None and plans.plan.context_budget.tools_tokens == 3000
    assert "tools 3,000 = " in plans.view.verdict.text()
    model = embedded_model_path()
    assert model is not None and plans.ctx.prefs.pins_for(model).tools_tokens is None
    with qtbot.waitSignal(plans.plan_shown, timeout=20000, check_params_cb=lambda p: p.pins.tools_tokens is None):
        plans.set_tools_tokens(0)
    assert "tools" not in plans.view.verdict.text()
