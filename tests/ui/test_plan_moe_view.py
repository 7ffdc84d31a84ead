"""The Plan panel on a mixture of experts (#39): Qwen3-30B-A3B at its real dimensions (a sparse
Q4_K_M file) planned for an 8 GB card shows where the experts are, an "Experts in RAM" pin with
"auto", the reasons and the placement alternatives with their predicted speeds. Real widgets,
offscreen; a screenshot goes to test-artifacts/ui/."""

from __future__ import annotations

from html import unescape
from pathlib import Path

from pytestqt.qtbot import QtBot

from testkit.machines import cpu_machine
from testkit.real_shapes import write_real
from tests.ui.conftest import ARTIFACTS
from vrampilot.gguf import load_model_spec
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan, replan_with
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.ui.plan.view import PlanView
from vrampilot.units import GIB


def test_the_plan_panel_shows_and_pins_the_experts_placement(qtbot: QtBot, tmp_path: Path) -> None:
    spec = load_model_spec(write_real("qwen3-30b-a3b", tmp_path))
    target = resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine(ram_gib=64))
    result = plan(spec, target)
    n = result.settings.n_cpu_moe
    assert 0 < n < spec.n_layer
    view = PlanView()
    qtbot.addWidget(view)
    view.set_targets([("vram", "Hypothetical GPU with 8.00 GiB")], "vram")
    view.set_plan(result)

    placement = unescape(view.placement.text())
    assert f"experts of {n} of 48 layers in RAM" in placement and "every layer's attention on the GPU" in placement
    assert "chosen by the planner" in placement
    assert f"experts of {n} layers in RAM" in view.verdict.text()
    spin = view.pins.n_cpu_moe
    assert not spin.isHidden()
    assert spin.isEnabled() and spin.value() == n and spin.maximum() == 48
    assert view.pins._auto["n_cpu_moe"].isChecked()
    assert f"Experts of {n} of 48 layers in RAM" in view.reasons.text()

    # The placement alternatives lead the table, each with its generation and prompt speed.
    table = [
        [cell.text() if (cell := view.alternatives.item(r, c)) is not None else "" for c in range(5)]
        for r in range(view.alternatives.rowCount())
    ]
    rows = {row[0]: row[1:] for row in table}
    assert table[0][0].startswith("experts of ")
    more = next(label for label in rows if label.startswith("experts of ") and int(label.split()[2]) > n)
    assert rows[more][3] == "yes" and float(rows[more][1]) < result.speed.decode_tps
    whole = next(label for label in rows if label.startswith("whole layers instead"))
    assert float(rows[whole][1]) < result.speed.decode_tps and int(rows[whole][2]) > 0

    view.resize(820, 1700)
    view.show()
    qtbot.waitExposed(view)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert view.grab().save(str(ARTIFACTS / "plan_moe_placement.png"))

    # Touching the spin box pins the count; the plan made with it says so.
    with qtbot.waitSignal(view.pins_changed) as sig:
        spin.setValue(n + 4)
    pins: Pins = sig.args[0]
    assert pins.n_cpu_moe == n + 4 and not view.pins._auto["n_cpu_moe"].isChecked()
    pinned = replan_with(result, n_cpu_moe=pins.n_cpu_moe)
    view.set_plan(pinned)
    assert "pinned by you" in view.placement.text() and view.pins.n_cpu_moe.value() == n + 4
    # "auto" gives the choice back.
    with qtbot.waitSignal(view.pins_changed) as sig:
        view.pins._auto["n_cpu_moe"].click()
    assert sig.args[0].n_cpu_moe is None


def test_a_dense_model_has_no_experts_pin(qtbot: QtBot) -> None:
    model = embedded_model_path()
    assert model is not None
    spec = load_model_spec(model)
    view = PlanView()
    qtbot.addWidget(view)
    view.set_plan(plan(spec, resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine()), alternatives=False))
    assert not view.pins.n_cpu_moe.isEnabled() and not view.pins._auto["n_cpu_moe"].isEnabled()
    # No experts to place: the row is not shown at all.
    assert view.pins.n_cpu_moe.isHidden() and view.pins._auto["n_cpu_moe"].isHidden()
    assert "everything on the GPU" in view.placement.text()
    assert "chosen by the planner" not in view.placement.text()
