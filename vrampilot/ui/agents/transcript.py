"""Tool calls in the chat's transcript: each call with its tool, arguments, result, duration and
how it was approved, live while the loop runs and again from the stored history.

A result is untrusted text (a web page, a file, whatever the server returned): every piece of it
is shown through a plain-text widget (QLabel with PlainText, QPlainTextEdit), never as rich text,
so markup in it is shown as written and never rendered or followed. A long result is collapsed to
its first lines, with a button to show it whole.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from vrampilot.tool_turn import ToolStep, one_line
from vrampilot.ui.theme import OVER_BUDGET

COLLAPSED_LINES = 6  # a result longer than this (or COLLAPSED_CHARS) is shown collapsed
COLLAPSED_CHARS = 600
VERDICTS = {
    "allowed": "allowed once",
    "always": "always allowed from now on",
    "policy": "always allowed",
    "flag": "allowed for this run",
    "denied": "denied by you",
    "refused": "not run",
}


def plain_label(text: str, name: str = "") -> QLabel:
    """A label that shows `text` as written, whatever markup it holds."""
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setText(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if name:
        label.setObjectName(name)
    return label


def is_long(text: str) -> bool:
    return len(text) > COLLAPSED_CHARS or text.count("\n") >= COLLAPSED_LINES


def collapsed(text: str) -> str:
    head = "\n".join(text.splitlines()[:COLLAPSED_LINES])[:COLLAPSED_CHARS]
    return head + "\n…"


class ToolStepWidget(QFrame):
    """One call: `server/tool · 0.4 s · allowed once`, its arguments, its result (or error)."""

    def __init__(self, step: ToolStep, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.step = step
        self.setObjectName("tool_step")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        where = f"{step.server}/{step.tool}" if step.server else step.tool
        facts = [VERDICTS.get(step.verdict, step.verdict)]
        if step.verdict not in ("denied", "refused"):
            facts.insert(0, f"{step.duration_s:.1f} s")
            if step.is_error:
                facts.append("failed")
            else:
                facts.append(f"{step.result_chars:,} characters" + (", cut for the model" if step.cut else ""))
        head = QHBoxLayout()
        self.title = plain_label(f"Tool call: {where}", "tool_title")
        self.title.setWordWrap(False)
        font = self.title.font()
        font.setBold(True)
        self.title.setFont(font)
        head.addWidget(self.title)
        self.facts = plain_label(" · ".join(facts), "tool_facts")
        self.facts.setEnabled(False)  # greyed: secondary information
        head.addWidget(self.facts, 1)
        lay.addLayout(head)
        self.arguments = plain_label(f"Arguments: {one_line(step.arguments, 2000) or '{}'}", "tool_arguments")
        lay.addWidget(self.arguments)
        failed = step.is_error or step.verdict in ("denied", "refused")
        self.result = QPlainTextEdit()
        self.result.setObjectName("tool_result")
        self.result.setReadOnly(True)
        self.result.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        if failed:
            self.result.setStyleSheet(f"color: {OVER_BUDGET};")
        self.result.setToolTip("The tool's result as the model was given it (shown as plain text)")
        lay.addWidget(self.result)
        self.toggle = QToolButton()
        self.toggle.setObjectName("tool_result_toggle")
        self.toggle.setCheckable(True)
        self.toggle.toggled.connect(self._show)
        self.toggle.setVisible(is_long(step.result))
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self._show(False)

    def _show(self, whole: bool) -> None:
        text = self.step.result
        shown = text if whole or not is_long(text) else collapsed(text)
        self.result.setPlainText(shown)
        self.toggle.setText("Show less" if whole else "Show the whole result")
        # A long result gets a box of a few lines (20 when whole) and scrolls, wrapped or not.
        lines = (20 if whole else COLLAPSED_LINES + 1) if is_long(text) else shown.count("\n") + 1
        self.result.setFixedHeight(self.result.fontMetrics().lineSpacing() * lines + 12)

    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def shown_result(self) -> str:
        return self.result.toPlainText()


class ToolCallsView(QWidget):
    """The calls of one reply's rounds, in the order they ran."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tool_calls")
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 0)
        self.steps: list[ToolStepWidget] = []

    def add_step(self, step: ToolStep) -> ToolStepWidget:
        w = ToolStepWidget(step)
        self._lay.addWidget(w)
        self.steps.append(w)
        return w
