"""Drafting in the Plan panel, on real widgets: a draft model typed in is planned with its bytes per
device and the speed-up predicted, n-gram drafting likewise, a draft of another vocabulary is
refused in one line and the panel stays usable, and "off" plans without one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QStringListModel, Qt
from pytestqt.qtbot import QtBot

from testkit.gguf_models import write_model
from tests import waits
from tests.ui.conftest import OpenWindow, open_chat, screenshot, seed_prefs
from tests.ui.test_plan_controller import plans, start  # noqa: F401 - the controller fixture
from vrampilot.paths import embedded_model_path
from vrampilot.planner.search.draft import request_from_text, stored_acceptance
from vrampilot.server import free_port
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow
from vrampilot.ui.plan.controller import PlanController
from vrampilot.ui.wrap import unwrapped


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
    text = unwrapped(view.draft_info.text())  # file names carry break opportunities (ui/wrap.py)
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
    return " ".join(unwrapped(lbl.text()) for lbl in view.findChildren(QLabel))


@pytest.mark.slow
def test_the_window_chats_with_a_draft_and_shows_its_acceptance(open_window: OpenWindow, qtbot: QtBot) -> None:
    """The whole path in the window: drafting typed in the Plan panel, Load, a reply, its stats
    line with the drafted tokens accepted, and the acceptance learned for the next plan."""
    seed_prefs(max_tokens=24)
    w: MainWindow = open_window()
    model = embedded_model_path()
    assert model is not None
    w.plan_view.draft.setText(str(model))
    with qtbot.waitSignal(w.plans.plan_shown, timeout=30000):
        w.plan_view.draft.editingFinished.emit()
    assert w.plans.plan is not None and w.plans.plan.settings.drafting
    qtbot.mouseClick(w.plan_view.load_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.plans.load_result is not None, cpu_s=60)
    view = w.chat_view
    view.input.setPlainText("Count from one to ten in words.")
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 2, cpu_s=60)
    stats = view.messages()[1].stats.text()
    assert "drafts " in stats and "accepted (" in stats
    stored = w.ctx.store.messages(open_chat(w))[1].stats
    assert stored is not None and stored["draft_tokens"] > 0
    # The reply taught the pair's acceptance: the next plan says it is measured.
    request = request_from_text(str(model))
    assert request is not None
    waits.until(qtbot, lambda: stored_acceptance(model, request).measured, cpu_s=10)


def test_the_drafting_field_offers_mtp_only_for_a_file_with_an_mtp_block(
    qtbot: QtBot,
    plans: PlanController,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    start(qtbot, plans)  # the embedded model: no MTP block
    view = plans.view
    choices = view.draft.completer().model()
    assert isinstance(choices, QStringListModel)  # what the field completes from
    assert choices.stringList() == ["off", "ngram"] and "mtp" not in view.draft.placeholderText()
    view.draft.setText("mtp")
    view.draft.editingFinished.emit()
    qtbot.waitUntil(lambda: "has no multi-token-prediction (MTP) block" in _shown(view), timeout=30000)
    assert plans.plan is not None and plans.plan.draft is None  # the last plan stays
    # A file with an MTP block: offered, planned with its context, and loading serves it.
    mtp = write_model(tmp_path / "ds2-mtp.gguf", "deepseek2", n_layer=4, n_nextn=1)
    with qtbot.waitSignal(plans.plan_shown, timeout=30000):
        plans.select_model(mtp)
    assert choices.stringList() == ["off", "ngram", "mtp"] and "mtp" in view.draft.placeholderText()
    p = plans.plan
    assert p is not None and p.draft is not None and p.draft.kind == "mtp" and p.settings.drafts_mtp
    assert "MTP drafting</b>" in view.draft_info.text() and "CPU" in view.draft_info.text()
    assert p.settings.server_only and "MTP block" in p.settings.server_only


@pytest.mark.slow
def test_the_window_drafts_with_mtp_through_llama_server(open_window: OpenWindow, qtbot: QtBot, tmp_path: Path) -> None:
    """MTP drafting in the window: Load starts llama-server with the plan (the in-app engine has no
    MTP drafter), the chat replies through it, and the reply's drafted tokens teach the acceptance."""
    from vrampilot.planner.search.draft import DraftRequest

    seed_prefs(max_tokens=16)
    w: MainWindow = open_window()
    mtp = write_model(tmp_path / "ds2-mtp.gguf", "deepseek2", n_layer=4, n_nextn=1, tokenizer="smollm2")
    with qtbot.waitSignal(w.plans.plan_shown, timeout=30000):
        w.plans.select_model(mtp)
    w.plan_view.draft.setText("mtp")
    with qtbot.waitSignal(w.plans.plan_shown, timeout=30000):
        w.plan_view.draft.editingFinished.emit()
    assert w.plans.plan is not None and w.plans.plan.settings.drafts_mtp
    w.server_panel.port.setValue(free_port())  # not the default 8080, which another test may hold
    qtbot.mouseClick(w.plan_view.load_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.chats.served is not None or w.server.state in ("stopped", "crashed"), cpu_s=120)
    assert w.chats.served is not None, w.server_panel.status.text()
    assert w.plans.load_result is None  # nothing loaded in-process: llama-server holds the model
    view = w.chat_view
    view.input.setPlainText("1, 2, 3, 4, 5,")
    qtbot.mouseClick(view.send_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 2, cpu_s=120)
    assert "drafts " in view.messages()[1].stats.text()
    stored = w.ctx.store.messages(open_chat(w))[1].stats
    assert stored is not None and stored["draft_tokens"] > 0
    waits.until(qtbot, lambda: stored_acceptance(mtp, DraftRequest("mtp")).measured, cpu_s=10)
