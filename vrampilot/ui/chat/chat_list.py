"""The list of saved chats: search, new, rename, delete, export."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from vrampilot.storage import ChatSummary
from vrampilot.ui.chat.search_results import HTML_ROLE, ResultDelegate, result_html


def _when(ts: float) -> str:
    """The time for a chat written today, else its date, with the year when it is not this year's:
    a chat stamped while the clock said 2100 (or 1971) must not read as one from today."""
    then, now = time.localtime(ts), time.localtime()
    if then[:3] == now[:3]:
        return time.strftime("%H:%M", then)
    return time.strftime("%d %b" if then.tm_year == now.tm_year else "%d %b %Y", then)


def _count(n: int) -> str:
    return f"{n} message{'' if n == 1 else 's'}"


class ChatList(QWidget):
    chat_selected = Signal(int)
    new_chat_requested = Signal()
    rename_requested = Signal(int)
    delete_requested = Signal(int)
    export_requested = Signal(int, str)  # chat id, "markdown" | "json"
    search_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.new_button = QPushButton("New chat")
        self.new_button.setObjectName("new_chat")
        self.new_button.setToolTip("Ctrl+N")
        self.new_button.clicked.connect(self.new_chat_requested)
        lay.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setObjectName("chat_search")
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(200)
        self._search_timer.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self.search.textChanged.connect(self._search_timer.start)
        lay.addWidget(self.search)
        self.list = QListWidget()
        self.list.setObjectName("chats")
        self.list.setWordWrap(True)
        self.list.setItemDelegate(ResultDelegate(self.list))
        self.list.currentItemChanged.connect(self._current_changed)
        lay.addWidget(self.list, 1)
        # Said in the list's place when a search finds nothing (an empty list reads as "broken").
        self.empty = QLabel()
        self.empty.setObjectName("chats_empty")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.hide()
        lay.addWidget(self.empty)
        row = QHBoxLayout()
        self.rename_button = QToolButton()
        self.rename_button.setText("Rename")
        self.rename_button.setObjectName("rename_chat")
        self.rename_button.clicked.connect(lambda: self._with_current(self.rename_requested.emit))
        self.delete_button = QToolButton()
        self.delete_button.setText("Delete")
        self.delete_button.setObjectName("delete_chat")
        self.delete_button.clicked.connect(lambda: self._with_current(self.delete_requested.emit))
        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setObjectName("export_chat")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        menu.addAction("As Markdown…").triggered.connect(
            lambda: self._with_current(lambda i: self.export_requested.emit(i, "markdown"))
        )
        menu.addAction("As JSON…").triggered.connect(
            lambda: self._with_current(lambda i: self.export_requested.emit(i, "json"))
        )
        self.export_button.setMenu(menu)
        for b in (self.rename_button, self.delete_button, self.export_button):
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        self._quiet = False

    def set_chats(self, chats: list[ChatSummary], current: int | None, *, query: str = "") -> None:
        self.empty.setText(f"No chats match “{query.strip()}”." if query.strip() and not chats else "")
        self.empty.setVisible(bool(self.empty.text()))
        self._quiet = True
        try:
            self.list.clear()
            needle = query.strip()
            for c in chats:
                when = _when(c.updated_at)
                text = c.title + (
                    f"\n{when} · in a message: {c.snippet}"
                    if c.snippet
                    else f"\n{when} · {'in the title' if needle else _count(c.n_messages)}"
                )
                item = QListWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, c.id)
                if needle:  # a search result: which part matched, the match highlighted
                    item.setData(HTML_ROLE, result_html(c.title, c.snippet, when, needle))
                item.setToolTip(c.title)
                self.list.addItem(item)
                if c.id == current:
                    self.list.setCurrentItem(item)
        finally:
            self._quiet = False
        self._update_buttons()

    def minimumSizeHint(self) -> QSize:
        # The window hides the list when it is narrow rather than keeping its width from the
        # window's minimum (vrampilot.ui.main_window.MainWindow.resizeEvent).
        return QSize(0, super().minimumSizeHint().height())

    def clear_current(self) -> None:
        self._quiet = True
        try:
            self.list.clearSelection()
            self.list.setCurrentRow(-1)
        finally:
            self._quiet = False
        self._update_buttons()

    def query(self) -> str:
        """The search box's words (the list shows the chats they find)."""
        return self.search.text()

    def focus_search(self) -> None:
        """Ctrl+F: into the search field, its text selected to type over."""
        self.search.setFocus()
        self.search.selectAll()

    def step(self, delta: int) -> None:
        """Open the next (+1) or previous (-1) chat in the list, wrapping around (Ctrl+Tab)."""
        n = self.list.count()
        if n == 0:
            return
        row = self.list.currentRow()
        self.list.setCurrentRow((row + delta) % n if row >= 0 else (0 if delta > 0 else n - 1))

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return int(item.data(Qt.ItemDataRole.UserRole)) if item is not None else None

    def ids(self) -> list[int]:
        return [int(self.list.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(self.list.count())]

    def _current_changed(self, *_a: object) -> None:
        self._update_buttons()
        if self._quiet:
            return
        cid = self.current_id()
        if cid is not None:
            self.chat_selected.emit(cid)

    def _with_current(self, fn: Callable[[int], object]) -> None:
        cid = self.current_id()
        if cid is not None:
            fn(cid)

    def _update_buttons(self) -> None:
        has = self.current_id() is not None
        for b in (self.rename_button, self.delete_button, self.export_button):
            b.setEnabled(has)
