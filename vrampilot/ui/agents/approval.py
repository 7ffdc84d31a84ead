"""The approval asked before a tool call: a dialog on the GUI thread, answered while the tool loop's
worker waits.

The loop calls its Approver on the worker thread and must have a Decision back; `GuiApprover` posts
the question to the GUI thread (a queued signal), where the dialog opens, and blocks the worker
until the user answers, Stop is pressed (the call is denied, the loop ends), or the window closes.
Deny is the default button and what Escape or closing the dialog means: the safe answer is the one
a stray Enter gives. What is shown is exactly what will be sent: the server, the tool and the
arguments as the model wrote them, as plain text.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QDialog, QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from vrampilot.agents import ApprovalRequest, Approver, Decision
from vrampilot.ui.agents.transcript import plain_label

WAIT_STEP_S = 0.05  # how often a waiting worker looks at Stop


class ApprovalDialog(QDialog):
    decided = Signal(object)  # Decision

    def __init__(self, request: ApprovalRequest, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.request = request
        self.setObjectName("approval_dialog")
        self.setWindowTitle("Allow a tool call?")
        lay = QVBoxLayout(self)
        lay.addWidget(
            plain_label(
                f"The model asks to run the tool {request.tool} of the MCP server {request.server}.", "question"
            )
        )
        if request.description.strip():
            about = plain_label(request.description.strip()[:600], "description")
            about.setEnabled(False)
            lay.addWidget(about)
        lay.addWidget(plain_label("With these arguments, exactly as they will be sent:"))
        self.arguments = QPlainTextEdit()
        self.arguments.setObjectName("arguments")
        self.arguments.setReadOnly(True)
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.arguments.setPlainText(json.dumps(request.arguments, indent=2, ensure_ascii=False))
        lay.addWidget(self.arguments)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.allow_once = QPushButton("Allow once")
        self.allow_once.setObjectName("allow_once")
        self.always = QPushButton("Always allow this tool")
        self.always.setObjectName("allow_always")
        self.always.setToolTip(f"Run {request.tool} of {request.server} from now on without asking")
        self.deny = QPushButton("Deny")
        self.deny.setObjectName("deny")
        for b, decision in (
            (self.allow_once, Decision.ALLOW_ONCE),
            (self.always, Decision.ALWAYS),
            (self.deny, Decision.DENY),
        ):
            b.setAutoDefault(False)
            b.clicked.connect(lambda _c=False, d=decision: self._answer(d))
            buttons.addWidget(b)
        self.deny.setDefault(True)  # Enter without looking denies
        lay.addLayout(buttons)
        self._answered = False
        self.resize(520, 320)

    def _answer(self, decision: Decision) -> None:
        if not self._answered:
            self._answered = True
            self.decided.emit(decision)
        self.done(QDialog.DialogCode.Rejected if decision is Decision.DENY else QDialog.DialogCode.Accepted)

    def reject(self) -> None:  # Escape, the close button, a withdrawn question
        self._answer(Decision.DENY)


@dataclass
class _Question:
    request: ApprovalRequest
    answered: threading.Event = field(default_factory=threading.Event)
    decision: Decision = Decision.DENY

    def answer(self, decision: Decision) -> None:
        self.decision = decision
        self.answered.set()


class GuiApprover(QObject):
    """Asks the user on the GUI thread; `for_reply(cancel)` is the Approver one reply's loop calls."""

    asked = Signal(object)  # the ApprovalDialog just opened (tests answer it)
    _ask = Signal(object)  # _Question, from the worker, queued to the GUI thread
    _withdraw = Signal()

    def __init__(self, parent_widget: QWidget | None = None) -> None:
        super().__init__()
        self._parent_widget = parent_widget
        self.dialog: ApprovalDialog | None = None
        self._closed = False
        self._ask.connect(self._show)
        self._withdraw.connect(self._close_dialog)

    def for_reply(self, cancel: threading.Event) -> Approver:
        def approve(request: ApprovalRequest) -> Decision:
            if self._closed or cancel.is_set():
                return Decision.DENY
            question = _Question(request)
            self._ask.emit(question)
            while not question.answered.wait(WAIT_STEP_S):
                if cancel.is_set() or self._closed:
                    self._withdraw.emit()  # Stop: the dialog goes, the call is denied
                    return Decision.DENY
            return question.decision

        return approve

    def _show(self, question: _Question) -> None:
        if self._closed:
            question.answer(Decision.DENY)
            return
        dialog = ApprovalDialog(question.request, self._parent_widget)
        dialog.decided.connect(question.answer)
        self.dialog = dialog
        dialog.open()  # window-modal, and the event loop goes on (replies, Stop) while it is open
        self.asked.emit(dialog)

    def _close_dialog(self) -> None:
        if self.dialog is not None and self.dialog.isVisible():
            self.dialog.reject()

    def shutdown(self) -> None:
        """The window closes: a waiting call is denied, nothing waits on a dialog that is gone."""
        self._closed = True
        self._close_dialog()
