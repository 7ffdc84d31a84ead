"""The documents panel on its own: chips, reading progress, the fit with Re-plan, prompt progress
with Cancel, and the context view (no model load: fast)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from testkit.machines import cpu_machine
from tests.documents.writers import long_report, write_pdf
from tests.ui.conftest import settle
from vrampilot.documents import DocumentSet, analyze_fit, extract, tokenizer_for
from vrampilot.engine import PromptProgress
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.ui.chat.documents_panel import DocumentsPanel
from vrampilot.ui.theme import apply_theme

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_panel_shows_documents_fit_progress_and_context(qtbot: QtBot, tmp_path: Path, embedded_model: Path) -> None:
    apply_theme(cast(QApplication, QApplication.instance()))  # Qt types it as the QCoreApplication base
    report = long_report()
    md = tmp_path / "infrastructure-review.md"
    md.write_text(report.markdown)
    pdf = write_pdf(tmp_path / "manual.pdf", [["Turbine inspection notes."], ["Second page."]])
    ds = DocumentSet(tokenizer_for(embedded_model).count, chunk_tokens=96, overlap_tokens=24)
    a1 = ds.attach(extract(md))
    ds.attach(extract(pdf))
    p = plan(
        load_model_spec(embedded_model), resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=1024)
    )
    fit = ds.fit(p, reply_tokens=256)
    assert fit.status == "replan"

    panel = DocumentsPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 420)
    panel.show()
    removed: list[str] = []
    panel.remove_requested.connect(removed.append)
    panel.set_attachments(ds.attachments)
    assert len(panel.chips()) == 2
    assert "infrastructure-review.md" in panel.chips()[0].label.text()
    assert "2 pages" in panel.chips()[1].label.text()
    panel.show_extraction("big.pdf", 0.4, "page 12 of 30")
    assert panel.extract_row.isVisible() and panel.extract_progress.value() == 400
    panel.set_fit(fit)
    assert panel.fit_row.isVisible() and panel.replan_button.isVisible()
    assert panel.replan_button.text() == "Re-plan" and "needs " in panel.fit_label.text()
    with qtbot.waitSignal(panel.replan_requested):
        qtbot.mouseClick(panel.replan_button, Qt.MouseButton.LeftButton)
    panel.show_prompt_progress(PromptProgress(2048, 6120, 11.0, 0))
    assert panel.prompt_row.isVisible()
    assert panel.prompt_label.text().startswith("Reading the prompt: 2,048 of 6,120 tokens · 186 tokens/s · about 22 s")
    with qtbot.waitSignal(panel.cancel_prompt_requested):
        qtbot.mouseClick(panel.prompt_cancel, Qt.MouseButton.LeftButton)
    composed = ds.compose("", [], report.questions[0].text, mode="retrieval", n_ctx=1024, reply_tokens=256)
    panel.set_context(composed.given)
    panel.context_toggle.setChecked(True)
    assert panel.context_view.isVisible()
    shown = panel.context_view.toPlainText()
    assert f"[1] {composed.given.chunks[0].chunk.label}" in shown and "chosen by BM25" in shown
    ARTIFACTS.mkdir(exist_ok=True)
    settle()
    assert panel.grab().save(str(ARTIFACTS / "docs-panel.png"))

    # Fits: green, no Re-plan button.
    panel.set_fit(analyze_fit(p, 200, reply_tokens=64))
    assert not panel.replan_button.isVisible() and "fits: 200 of 1K context" in panel.fit_label.text()
    qtbot.mouseClick(panel.chips()[0].findChild(type(panel.context_toggle), "chip_remove"), Qt.MouseButton.LeftButton)
    assert removed == [a1.sha256]
    panel.set_attachments([])
    assert not panel.fit_row.isVisible() and not panel.context_toggle.isVisible()


def test_a_long_name_or_progress_line_does_not_widen_the_panel(qtbot: QtBot) -> None:
    """The layout jumped while a long document was read (issue 58, low): each new progress line set
    the panel's minimum width, the splitter moved and the side panel slid."""
    panel = DocumentsPanel()
    qtbot.addWidget(panel)
    panel.resize(500, 300)
    panel.show()
    panel.show_extraction("a.pdf", 0.1, "page 1 of 3")
    panel.show_prompt_progress(PromptProgress(20, 60, 1.0, 0))
    QApplication.processEvents()
    before = panel.minimumSizeHint().width()
    panel.show_extraction(
        "a-very-long-annual-report-of-the-infrastructure-board-2026-final-v3.pdf", 0.5, "page 1,200 of 2,400"
    )
    panel.show_prompt_progress(PromptProgress(120_000, 580_000, 3.0, 12_000))
    QApplication.processEvents()
    assert panel.minimumSizeHint().width() <= before, (before, panel.minimumSizeHint().width())
    assert "infrastructure-board" in panel.extract_label.toolTip()
