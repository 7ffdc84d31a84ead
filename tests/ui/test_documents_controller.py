"""The documents controller on its own, without the window: its panel, a context on this test's own
data folder, the embedded model's tokenizer and real files (text, a long report, a broken PDF)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from testkit.machines import cpu_machine
from tests.documents.writers import long_report
from tests.ui.conftest import heard
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.chat.documents_controller import DocumentsController


@pytest.fixture
def docs(qtbot: QtBot, app_context: AppContext) -> Iterator[DocumentsController]:
    controller = DocumentsController(app_context)
    qtbot.addWidget(controller.panel)
    controller.reply_tokens = 64  # the window keeps this at the sampling panel's max tokens
    yield controller
    controller.shutdown()


def small_plan(model: Path) -> Plan:
    return plan(load_model_spec(model), resolve_target(TargetRequest(cpu_only=True), cpu_machine()), Pins(n_ctx=1024))


def attach(qtbot: QtBot, docs: DocumentsController, path: Path) -> str:
    """Attach `path` and return what the controller said once it was read (or refused)."""
    with qtbot.waitSignal(docs.status, timeout=60000) as said:
        docs.attach_files([path])
    return str(said.args[0])


def test_documents_are_read_counted_fitted_and_refused_in_words(
    qtbot: QtBot, docs: DocumentsController, tmp_path: Path, embedded_model: Path
) -> None:
    note = tmp_path / "note.txt"
    note.write_text("The north turbine was inspected on Monday; the blades need new coating.")
    docs.attach_files([note])  # no plan yet: no tokenizer to count in
    assert "Select a model first" in docs.panel.error_label.text() and docs.attachments == []

    docs.set_plan(small_plan(embedded_model))
    said = attach(qtbot, docs, note)
    [a] = docs.attachments
    assert said == f"Attached note.txt: {a.tokens} tokens" and 0 < a.tokens < 200 and docs.active
    qtbot.waitUntil(lambda: docs.fit is not None, timeout=30000)
    assert docs.fit is not None and docs.fit.fits and docs.fit.n_ctx == 1024

    review = tmp_path / "review.md"
    review.write_text(long_report().markdown)
    attach(qtbot, docs, review)
    qtbot.waitUntil(lambda: docs.fit is not None and docs.fit.status == "replan", timeout=60000)
    suggested = docs.fit.suggested_ctx
    assert suggested is not None and suggested > 1024
    replans = heard(docs.replan_requested)
    docs.panel.replan_requested.emit()  # the Re-plan button
    assert replans == [suggested]

    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 this is not a PDF")
    said = attach(qtbot, docs, broken)
    assert "broken.pdf" in said and "Traceback" not in said
    assert not docs.panel.error_label.isHidden() and len(docs.attachments) == 2  # the others stay

    with qtbot.waitSignal(docs.changed, timeout=30000):  # the fit, made again without the report
        docs.remove(docs.attachments[1].sha256)
    assert docs.fit is not None and docs.fit.fits
    assert [x.name for x in docs.attachments] == ["note.txt"]
