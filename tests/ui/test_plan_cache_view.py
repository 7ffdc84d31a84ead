"""The Plan panel's "Cache by part" section on DeepSeek-V4-Pro at its real dimensions (a sparse
file): collapsed until asked, then the parts at 8K-1M tokens and the labelled "what if" caches.
A screenshot of it goes to test-artifacts/ui/."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from testkit.machines import cpu_machine
from testkit.real_shapes import write_real
from tests.ui.conftest import ARTIFACTS
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.ui.plan.view import PlanView


def test_cache_by_part_shows_the_parts_and_what_if(qtbot: QtBot, tmp_path: Path) -> None:
    spec = load_model_spec(write_real("v4-pro", tmp_path))
    result = plan(
        spec, resolve_target(TargetRequest(), cpu_machine(ram_gib=256)), Pins(n_ctx=1048576), alternatives=False
    )
    view = PlanView()
    qtbot.addWidget(view)
    view.set_plan(result)
    assert view.cache_table.isHidden() and view.cache_table.text() == ""
    view.cache_toggle.setChecked(True)
    text = view.cache_table.text()
    assert not view.cache_table.isHidden()
    for word in ("window", "csa", "hca", "indexer", "state", "1M", "What if", "MHA", "GQA", "MLA"):
        assert word in text
    assert "kv_lora_rank 512 + rope 64" in text
    view.resize(900, 1400)
    view.show()
    qtbot.waitExposed(view)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert view.grab().save(str(ARTIFACTS / "plan_cache_by_part.png"))
    view.cache_toggle.setChecked(False)
    assert view.cache_table.isHidden()
