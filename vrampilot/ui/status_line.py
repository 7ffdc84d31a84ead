"""The status bar's line: cut with "…" where the window is too narrow for it, the whole text in its
tooltip and in text().

A plain label in the status bar was clipped wherever the width ran out, mid-word and with no sign
that more followed ("…under a minute at a quiet" at 800x600, issue 58). Eliding only where it is
painted keeps text() the whole line, which the window, its tests and screen readers read.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class StatusLine(QLabel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Never widens the window: the status bar gives it what the permanent widgets leave.
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)

    def set_line(self, text: str) -> None:
        self.setText(text)
        self.setToolTip(text)

    def shown_text(self) -> str:
        """What is painted: the text, cut with "…" to the width the label has."""
        return self.fontMetrics().elidedText(
            self.text(), Qt.TextElideMode.ElideRight, max(self.contentsRect().width(), 1)
        )

    def paintEvent(self, _event: QPaintEvent) -> None:
        p = QPainter(self)
        self.style().drawItemText(
            p,
            self.contentsRect(),
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
            self.palette(),
            self.isEnabled(),
            self.shown_text(),
            self.foregroundRole(),
        )
        p.end()
