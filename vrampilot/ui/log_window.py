"""Help > Show log: the end of the app's log file, to read, copy or attach to a bug report."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QFontDatabase, QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from vrampilot.log import read_tail


class LogWindow(QDialog):
    def __init__(self, path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("VRAM Pilot log")
        self.path = path
        lay = QVBoxLayout(self)
        where = QLabel(f"{path}")
        where.setObjectName("log_path")
        lay.addWidget(where)
        self.text = QPlainTextEdit()
        self.text.setObjectName("log_text")
        self.text.setReadOnly(True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        lay.addWidget(self.text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        copy = QPushButton("Copy all")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.text.toPlainText()))
        folder = QPushButton("Open folder")
        folder.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.parent))))
        for b in (refresh, copy, folder):
            buttons.addButton(b, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        em = self.fontMetrics().averageCharWidth()
        self.resize(110 * em, 40 * self.fontMetrics().height())
        self.refresh()

    def refresh(self) -> None:
        text = read_tail(self.path)
        self.text.setPlainText(text or "The log is empty: nothing unexpected has happened.")
        self.text.verticalScrollBar().setValue(self.text.verticalScrollBar().maximum())
