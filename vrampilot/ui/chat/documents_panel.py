"""The documents strip above the chat input: attached files as chips, the reading progress, the
fit against the plan with its Re-plan button, the prompt-processing progress with Cancel, and
"Context given to the model". A view only: DocumentsController decides what happens."""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from vrampilot.documents import Attachment, ContextGiven, FitReport, tokens_text
from vrampilot.engine import PromptProgress
from vrampilot.ui.theme import OK_GREEN, OVER_BUDGET, WARN_AMBER


def steady(label: QLabel) -> None:
    """A one-line label whose text changes as work goes on (a long file name, growing counts) must
    not set the chat column's minimum width: the splitter moved at every update and the side panel,
    its Export button with it, slid to the edge (issue 58, low). It may be cut instead."""
    label.setMinimumWidth(1)


class DocumentChip(QFrame):
    remove_requested = Signal(str)  # sha256

    def __init__(self, att: Attachment, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sha256 = att.sha256
        self.setObjectName(f"chip_{att.sha256[:12]}")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 2, 2, 2)
        pages = f"{att.document.n_pages} pages · " if att.document.n_pages else ""
        self.label = QLabel(f"<b>{html.escape(att.name)}</b> <span>{pages}{tokens_text(att.tokens)} tokens</span>")
        self.label.setObjectName("chip_label")
        steady(self.label)
        tip = [str(att.document.path), f"{att.tokens} tokens in this model's tokenizer", f"{len(att.chunks)} chunks"]
        tip += list(att.document.warnings)
        self.setToolTip("\n".join(tip))
        lay.addWidget(self.label)
        remove = QToolButton()
        remove.setObjectName("chip_remove")
        remove.setText("×")
        remove.setToolTip(f"Remove {att.name} from this chat")
        remove.setAutoRaise(True)
        remove.clicked.connect(lambda: self.remove_requested.emit(self.sha256))
        lay.addWidget(remove)


class DocumentsPanel(QFrame):
    remove_requested = Signal(str)
    replan_requested = Signal()
    cancel_extraction_requested = Signal()
    cancel_prompt_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("documents_panel")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 2, 0, 2)
        lay.setSpacing(3)

        top = QHBoxLayout()  # documents are attached with the chat's Attach button, or dropped
        self._chips = QHBoxLayout()
        self._chips.setSpacing(4)
        top.addLayout(self._chips)
        top.addStretch(1)
        self.context_toggle = QToolButton()
        self.context_toggle.setObjectName("context_toggle")
        self.context_toggle.setText("Context given to the model")
        self.context_toggle.setCheckable(True)
        self.context_toggle.setEnabled(False)
        top.addWidget(self.context_toggle)
        lay.addLayout(top)

        # Reading a file
        self.extract_row = QWidget()
        er = QHBoxLayout(self.extract_row)
        er.setContentsMargins(0, 0, 0, 0)
        self.extract_label = QLabel()
        self.extract_label.setObjectName("extract_label")
        steady(self.extract_label)
        self.extract_progress = QProgressBar()
        self.extract_progress.setObjectName("extract_progress")
        self.extract_progress.setRange(0, 1000)
        self.extract_progress.setTextVisible(False)
        self.extract_cancel = QPushButton("Cancel")
        self.extract_cancel.setObjectName("cancel_extraction")
        self.extract_cancel.clicked.connect(self.cancel_extraction_requested)
        er.addWidget(self.extract_label)
        er.addWidget(self.extract_progress, 1)
        er.addWidget(self.extract_cancel)
        self.extract_row.hide()
        lay.addWidget(self.extract_row)

        self.error_label = QLabel()
        self.error_label.setObjectName("document_error")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        lay.addWidget(self.error_label)

        # Fit against the plan
        self.fit_row = QFrame()
        self.fit_row.setObjectName("fit_row")
        fr = QHBoxLayout(self.fit_row)
        fr.setContentsMargins(0, 0, 0, 0)
        self.fit_label = QLabel()
        self.fit_label.setObjectName("fit_message")
        self.fit_label.setWordWrap(True)
        self.fit_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.replan_button = QPushButton("Re-plan")
        self.replan_button.setObjectName("replan_for_document")
        self.replan_button.clicked.connect(self.replan_requested)
        fr.addWidget(self.fit_label, 1)
        fr.addWidget(self.replan_button)
        self.fit_row.hide()
        lay.addWidget(self.fit_row)

        # Reading the prompt
        self.prompt_row = QWidget()
        pr = QHBoxLayout(self.prompt_row)
        pr.setContentsMargins(0, 0, 0, 0)
        self.prompt_progress = QProgressBar()
        self.prompt_progress.setObjectName("prompt_progress")
        self.prompt_progress.setRange(0, 1000)
        self.prompt_progress.setTextVisible(False)
        self.prompt_label = QLabel()
        self.prompt_label.setObjectName("prompt_label")
        steady(self.prompt_label)
        self.prompt_cancel = QPushButton("Cancel")
        self.prompt_cancel.setObjectName("cancel_prompt")
        self.prompt_cancel.setToolTip("Stop reading; the chat and what was read so far are kept (Esc)")
        self.prompt_cancel.clicked.connect(self.cancel_prompt_requested)
        pr.addWidget(self.prompt_label)
        pr.addWidget(self.prompt_progress, 1)
        pr.addWidget(self.prompt_cancel)
        self.prompt_row.hide()
        lay.addWidget(self.prompt_row)

        self.context_view = QTextBrowser()
        self.context_view.setObjectName("context_view")
        self.context_view.setOpenLinks(False)
        self.context_view.setMaximumHeight(self.fontMetrics().height() * 14)
        self.context_view.hide()
        self.context_toggle.toggled.connect(self.context_view.setVisible)
        lay.addWidget(self.context_view)
        self._chip_widgets: list[DocumentChip] = []
        self._update_visibility()

    # -- chips ---------------------------------------------------------------------------------
    def set_attachments(self, atts: Sequence[Attachment]) -> None:
        for w in self._chip_widgets:
            w.setParent(None)
            w.deleteLater()
        self._chip_widgets = []
        for att in atts:
            chip = DocumentChip(att)
            chip.remove_requested.connect(self.remove_requested)
            self._chips.addWidget(chip)
            self._chip_widgets.append(chip)
        if not atts:
            self.set_fit(None)
            self.set_context(None)
        self._update_visibility()

    def chips(self) -> list[DocumentChip]:
        return list(self._chip_widgets)

    # -- extraction ----------------------------------------------------------------------------
    def show_extraction(self, name: str, fraction: float, what: str) -> None:
        self.extract_label.setText(f"Reading {name}: {what}")
        self.extract_label.setToolTip(self.extract_label.text())
        self.extract_progress.setValue(int(fraction * 1000))
        self.extract_row.show()

    def hide_extraction(self) -> None:
        self.extract_row.hide()

    def show_error(self, text: str) -> None:
        self.error_label.setText(f'<span style="color:{OVER_BUDGET}">●</span> {html.escape(text)}')
        self.error_label.setVisible(bool(text))

    def hide_error(self) -> None:
        self.error_label.hide()

    # -- fit -----------------------------------------------------------------------------------
    def set_fit(self, report: FitReport | None, *, note: str = "") -> None:
        if report is None and not note:
            self.fit_row.hide()
            return
        text = note or (report.message if report else "")
        color = OK_GREEN if report is not None and report.fits else WARN_AMBER
        self.fit_label.setText(f'<span style="color:{color}">●</span> {html.escape(text)}')
        offer = report is not None and report.replan is not None
        self.replan_button.setVisible(offer)
        if report is not None and report.suggested_ctx:
            label = "Re-plan anyway" if report.status == "beyond_training" else "Re-plan"
            self.replan_button.setText(label)
            self.replan_button.setToolTip(f"Plan again with {report.suggested_ctx} tokens of context and reload")
        self.fit_row.show()

    # -- prompt progress -----------------------------------------------------------------------
    def show_prompt_progress(self, p: PromptProgress) -> None:
        self.prompt_progress.setValue(int(p.fraction * 1000))
        self.prompt_label.setText(p.text())
        self.prompt_row.show()

    def hide_prompt_progress(self) -> None:
        self.prompt_row.hide()

    # -- context given -------------------------------------------------------------------------
    def set_context(self, given: ContextGiven | None) -> None:
        self.context_toggle.setEnabled(given is not None)
        if given is None:
            self.context_view.clear()
            self.context_toggle.setChecked(False)
            return
        parts = [f"<p><b>{html.escape(given.summary())}</b><br>for: <i>{html.escape(given.question)}</i></p>"]
        if given.mode == "full":
            for name, tokens, pages in given.documents:
                where = f", {pages} pages" if pages else ""
                parts.append(f"<p>{html.escape(name)}: the whole text ({tokens} tokens{where})</p>")
        for g in given.chunks:
            head = f"[{g.n}] {g.chunk.label}"
            if g.chunk.section and g.chunk.page_start is not None:
                head += f" — {g.chunk.section}"
            body = html.escape(g.chunk.text[:600] + ("…" if len(g.chunk.text) > 600 else ""))
            parts.append(
                f"<p><b>{html.escape(head)}</b> <small>({g.chunk.tokens} tokens, score {g.score:.2f})</small><br>"
                f"<span style='white-space:pre-wrap'>{body}</span></p>"
            )
        self.context_view.setHtml("".join(parts))

    def _update_visibility(self) -> None:
        has = bool(self._chip_widgets)
        self.context_toggle.setVisible(has)
