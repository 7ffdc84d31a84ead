"""Drafting in the Plan panel, on real widgets: a draft model typed in is planned with its bytes per
device and the speed-up predicted, n-gram drafting likewise, a draft of another vocabulary is
refused in one line and the panel stays usable, and "off" plans without one."""

from __future__ import annotations

import shutil
from pathlib import Path

from pytestqt.qtbot import QtBot

from testkit.gguf_models import write_model
from tests.ui.conftest import screenshot
from tests.ui.test_plan_controller import plans, start  # noqa: F401 - the controller fixture
from vrampilot.paths import embedded_model_path
from vrampilot.ui.plan_controller import PlanController


def _type_draft(qtbot: QtBot, plans: PlanController, text: str) -> None:  # noqa: F811 - the fixture's name
    view = plans.view
    view.draft.setText(text)
    with qtbot.waitSignal(plans.plan_shown, timeout=30000):
        view.draft.editingFinished.emit()


def test_the_plan_panel_shows_the_drafts_bytes_and_predicted_speedup(
    qtbot: QtBot,
    plans: PlanController,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    start(qtbot, plans)
    view = plans.view
    assert view.draft_info.isHidden() and plans.plan is not None and plans.plan.draft is None
    model = embedded_model_path()
    assert model is not None
    _type_draft(qtbot, plans, str(model))
    p = plans.plan
    assert p is not None and p.draft is not None and p.draft.spec is not None
    assert p.settings.spec_type == "draft" and p.settings.draft_model == str(model)
    text = view.draft_info.text()
    assert not view.draft_info.isHidden()
    assert f"Draft</b> {model.name}" in text and "CPU" in text and "x</b> decoding predicted" in text
    assert "assumed until replies measure it" in text
    assert any(r.startswith("Draft SmolLM2") for r in p.reasons)
    shot = screenshot(view, "spec-plan")
    shutil.copy(shot, "/tmp/spec-plan.png")

    # A draft of another vocabulary: refused in one line, the panel keeps working.
    other = write_model(tmp_path / "other-vocab.gguf", "llama")
    view.draft.setText(str(other))
    view.draft.editingFinished.emit()
    qtbot.waitUntil(lambda: "cannot draft for" in view.verdict.text() + view.reasons.text() + view.speed.text()
                    or "cannot draft for" in _shown(view), timeout=30000)  # fmt: skip
    _type_draft(qtbot, plans, "ngram")
    p = plans.plan
    assert p is not None and p.draft is not None and p.draft.kind == "ngram"
    assert "N-gram drafting" in view.draft_info.text()
    _type_draft(qtbot, plans, "off")
    assert plans.plan is not None and plans.plan.draft is None and view.draft_info.isHidden()


def _shown(view: object) -> str:
    from PySide6.QtWidgets import QLabel, QWidget

    assert isinstance(view, QWidget)
    return " ".join(lbl.text() for lbl in view.findChildren(QLabel))
