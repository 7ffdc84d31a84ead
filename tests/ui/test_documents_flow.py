"""End to end in the real window on the embedded model: drop a document, see the fit, re-plan in
one click, ask with prompt progress (and cancel), follow up cheaply, restart and restore the saved
KV state, then a document too long for the plan answered from retrieval with its chunks shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from tests import waits
from tests.documents.writers import long_report
from tests.ui.conftest import OpenWindow, open_chat, seed_prefs, settle
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow

pytestmark = pytest.mark.slow
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def shot(widget: QWidget, qtbot: QtBot, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    settle()
    assert widget.grab().save(str(ARTIFACTS / f"docs-{name}.png"))


def drop(w: MainWindow, *paths: Path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    event = QDropEvent(
        QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    )
    w.dropEvent(event)


def ask(w: MainWindow, qtbot: QtBot, text: str) -> None:
    w.chat_view.input.setPlainText(text)
    qtbot.mouseClick(w.chat_view.send_button, Qt.MouseButton.LeftButton)


def done(w: MainWindow) -> bool:
    return w.chats.state is ChatState.IDLE


def test_document_fit_replan_progress_follow_up_restore_and_retrieval(
    open_window: OpenWindow, qtbot: QtBot, tmp_path: Path
) -> None:
    seed_prefs(max_tokens=8)
    small = tmp_path / "five-sites.md"
    small.write_text(long_report(n_sections=5).markdown)
    w: MainWindow = open_window()
    panel = w.documents.panel

    # Drop: read on a worker, a chip with its tokens, and the fit against the 1K plan.
    drop(w, small)
    waits.until(qtbot, lambda: len(panel.chips()) == 1 and w.documents.fit is not None, cpu_s=30)
    fit = w.documents.fit
    assert fit is not None and fit.status == "replan" and fit.suggested_ctx == 1536
    assert "the current plan has 1K" in panel.fit_label.text() and "1.5K fits in RAM" in panel.fit_label.text()
    assert panel.replan_button.isVisible()
    shot(w, qtbot, "fit")

    # One click: the planner pins 1.5K, the model loads with it, and the document fits.
    qtbot.mouseClick(panel.replan_button, Qt.MouseButton.LeftButton)
    waits.until(
        qtbot, lambda: w.plans.load_result is not None and w.plans.load_result.plan.settings.n_ctx == 1536, cpu_s=60
    )
    qtbot.waitUntil(lambda: w.documents.fit is not None and w.documents.fit.fits, timeout=20000)
    assert panel.fit_label.text().endswith("of 1.5K context") and not panel.replan_button.isVisible()

    # Ask: the prompt-progress bar shows tokens, rate and time left; Cancel keeps the chat.
    ask(w, qtbot, "Who was the chief engineer of the Old Mill Dam?")
    waits.until(qtbot, lambda: panel.prompt_row.isVisible() and panel.prompt_progress.value() > 0, cpu_s=60)
    assert "Reading the prompt:" in panel.prompt_label.text() and "tokens/s" in panel.prompt_label.text()
    shot(w, qtbot, "progress")
    qtbot.mouseClick(panel.prompt_cancel, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: done(w), cpu_s=60)
    assert not panel.prompt_row.isVisible()
    assert [m.role for m in w.ctx.store.messages(open_chat(w))] == ["user"]
    read_before_cancel = w.ctx.engine.engine.tokens_in_cache
    assert read_before_cancel > 0

    # Asking again joins the question that got no reply (two questions in a row never reach the model).
    ask(w, qtbot, "Please answer: who was the chief engineer of the Old Mill Dam?")
    waits.until(qtbot, lambda: done(w) and len(w.ctx.store.messages(w.chats.chat_id)) == 2, cpu_s=120)  # type: ignore[arg-type]  # chat_id: set once a message was sent
    first = w.ctx.store.messages(open_chat(w))
    assert [m.role for m in first] == ["user", "assistant"] and "Please answer" in first[0].content
    s1 = first[1].stats
    assert s1 is not None and s1["reused_tokens"] >= read_before_cancel  # what was read before Cancel is kept
    assert "Read whole: five-sites.md" in w.chat_view.messages()[-1].stats.text()

    # Follow-up: only the new turn is evaluated (the engine's count).
    ask(w, qtbot, "When was it commissioned?")
    waits.until(qtbot, lambda: done(w) and len(w.ctx.store.messages(w.chats.chat_id)) == 4, cpu_s=60)  # type: ignore[arg-type]  # chat_id: set once a message was sent
    s2 = w.ctx.store.messages(open_chat(w))[3].stats
    assert s2 is not None and s2["reused_tokens"] > w.documents.docs.doc_tokens  # type: ignore[union-attr]  # documents are attached
    assert s2["evaluated_tokens"] < 0.05 * s2["prompt_tokens"]
    panel.context_toggle.setChecked(True)
    assert "Whole document: five-sites.md" in panel.context_view.toPlainText()
    shot(w, qtbot, "follow-up")
    key = w.documents.saved_state_key()
    assert key is not None
    qtbot.waitUntil(lambda: w.documents.kv.has(key), timeout=20000)
    chat_id = w.chats.chat_id
    assert chat_id is not None
    w.close()

    # Restart: the chat comes back with its document; loading restores the saved cache.
    w2: MainWindow = open_window()
    assert w2.chats.chat_id == chat_id
    waits.until(qtbot, lambda: len(w2.documents.panel.chips()) == 1, cpu_s=30)
    statuses: list[str] = []
    w2.documents.status.connect(statuses.append)
    qtbot.mouseClick(w2.plan_view.load_button, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: any(s.startswith("Restored the saved model state") for s in statuses), cpu_s=60)
    ask(w2, qtbot, "Who lives nearby?")
    waits.until(qtbot, lambda: done(w2) and len(w2.ctx.store.messages(chat_id)) == 6, cpu_s=60)
    s3 = w2.ctx.store.messages(chat_id)[5].stats
    assert s3 is not None and s3["reused_tokens"] >= s2["context_used"]
    assert s3["evaluated_tokens"] < 0.05 * s3["prompt_tokens"]

    # A long document on top: past what 1.5K holds, answered from retrieval with the chunks shown.
    big = tmp_path / "full-review.md"
    big.write_text(long_report().markdown)
    drop(w2, big)
    p2 = w2.documents.panel
    waits.until(
        qtbot,
        lambda: len(p2.chips()) == 2 and w2.documents.fit is not None and w2.documents.fit.status != "fits",
        cpu_s=30,
    )
    assert "the current plan has 1.5K" in p2.fit_label.text()
    ask(w2, qtbot, "Who was the chief engineer of the Granite Bridge?")
    waits.until(qtbot, lambda: done(w2) and len(w2.ctx.store.messages(chat_id)) == 8, cpu_s=120)
    given = w2.documents.last_given
    assert given is not None and given.mode == "retrieval" and given.chunks
    assert any("Granite Bridge" in g.chunk.text for g in given.chunks[:3])
    p2.context_toggle.setChecked(True)
    assert "chosen by BM25" in p2.context_view.toPlainText() and "[1] " in p2.context_view.toPlainText()
    stats_line = w2.chat_view.messages()[-1].stats.text()
    assert "Given [1]" in stats_line or "Cites [" in stats_line
    shot(w2, qtbot, "retrieval")
