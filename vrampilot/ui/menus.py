"""Menus from a table: (menu title, [(text, slot, shortcut, object name) or None for a separator]).

Shortcuts are window shortcuts, added to the window itself so they work whichever widget has the
focus. A nested table (text, [items]) makes a submenu.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

Shortcut: TypeAlias = QKeySequence | QKeySequence.StandardKey | None
Item: TypeAlias = "tuple[str, Callable[[], object], Shortcut, str] | tuple[str, Sequence[Item]] | None"


def build_menus(window: QMainWindow, table: Sequence[tuple[str, Sequence[Item]]]) -> dict[str, QAction]:
    """Fill the window's menu bar; returns the named actions."""
    named: dict[str, QAction] = {}

    def fill(menu: QMenu, items: Sequence[Item]) -> None:
        for item in items:
            if item is None:
                menu.addSeparator()
            elif len(item) == 2:
                fill(menu.addMenu(item[0]), item[1])
            else:
                text, slot, shortcut, name = item
                act = menu.addAction(text)
                act.triggered.connect(lambda _checked=False, s=slot: s())
                if shortcut is not None:
                    act.setShortcut(shortcut)
                    act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
                    window.addAction(act)
                if name:
                    act.setObjectName(name)
                    named[name] = act

    for title, items in table:
        fill(window.menuBar().addMenu(title), items)
    return named
