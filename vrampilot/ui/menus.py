"""Menus from a table: (menu title, [(text, slot, shortcut, object name) or None for a separator]).

Shortcuts are window shortcuts, added to the window itself so they work whichever widget has the
focus. A nested table (text, [items]) makes a submenu. `window_menus` is the main window's table,
kept here so the window module holds layout and wiring only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol, TypeAlias

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMenu, QMenuBar, QTabWidget, QWidget

from vrampilot.ui import dialogs
from vrampilot.ui.chat.chat_list import ChatList
from vrampilot.ui.chat.controller import ChatController
from vrampilot.ui.chat.view import ChatView
from vrampilot.ui.columns import Columns
from vrampilot.ui.plan.controller import PlanController
from vrampilot.ui.plan.view import SHELL_NAMES
from vrampilot.ui.theme import THEME_CHOICES, ThemeChoice


class MenuBarOwner(Protocol):
    def menuBar(self) -> QMenuBar: ...
    def addAction(self, action: QAction) -> None: ...


class MenuWindow(MenuBarOwner, Protocol):
    """What the main window's menus reach: its controllers, views and commands. A protocol, not
    the window's class, so that this module does not import the window that imports it."""

    @property
    def chats(self) -> ChatController: ...
    @property
    def chat_list(self) -> ChatList: ...
    @property
    def chat_view(self) -> ChatView: ...
    @property
    def plans(self) -> PlanController: ...
    @property
    def hub(self) -> QWidget: ...
    @property
    def server_panel(self) -> QWidget: ...
    @property
    def mcp_panel(self) -> QWidget: ...
    @property
    def center_tabs(self) -> QTabWidget: ...
    @property
    def right_tabs(self) -> QTabWidget: ...
    @property
    def columns(self) -> Columns: ...

    def close(self) -> bool: ...
    def open_files(self) -> None: ...
    def add_folder(self) -> None: ...
    def attach_files(self) -> None: ...
    def with_chat(self, fn: Callable[[int], object]) -> None: ...
    def rename_chat(self, chat_id: int) -> None: ...
    def export_chat(self, chat_id: int, fmt: str) -> None: ...
    def export_command(self, shell: str) -> str: ...
    def show_log(self) -> object: ...
    def set_theme(self, choice: ThemeChoice) -> None: ...
    def window(self) -> QWidget: ...


Shortcut: TypeAlias = QKeySequence | QKeySequence.StandardKey | None
Item: TypeAlias = "tuple[str, Callable[[], object], Shortcut, str] | tuple[str, Sequence[Item]] | None"


def build_menus(window: MenuBarOwner, table: Sequence[tuple[str, Sequence[Item]]]) -> dict[str, QAction]:
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


def window_menus(w: MenuWindow) -> dict[str, QAction]:
    """The main window's menu bar; returns its named actions (tests and shortcuts find them by name)."""
    key = QKeySequence
    with_chat = w.with_chat
    exports = [
        (f"for {label}", partial(w.export_command, shell), None, f"menu_export_{shell}")
        for shell, label in SHELL_NAMES.items()
    ]
    themes = [(label, partial(w.set_theme, choice), None, f"theme_{choice}") for choice, label in THEME_CHOICES.items()]
    named = build_menus(
        w,
        [
            (
                "&File",
                [
                    ("Open GGUF…", w.open_files, key.StandardKey.Open, ""),
                    ("Add model folder…", w.add_folder, None, ""),
                    ("Attach documents or images…", w.attach_files, None, "action_attach"),
                    None,
                    ("Quit", w.close, key.StandardKey.Quit, ""),
                ],
            ),
            (
                "&Chat",
                [
                    ("New chat", w.chats.new_chat, key("Ctrl+N"), "action_new_chat"),
                    ("Search chats", w.columns.search_chats, key("Ctrl+F"), "action_search"),
                    ("Rename chat…", lambda: with_chat(w.rename_chat), key("F2"), "action_rename"),
                    (
                        "Delete chat…",
                        lambda: with_chat(w.chats.delete),
                        key("Ctrl+Shift+Delete"),
                        "action_delete",
                    ),
                    ("Next chat", lambda: w.chat_list.step(1), key("Ctrl+Tab"), "action_next_chat"),
                    (
                        "Previous chat",
                        lambda: w.chat_list.step(-1),
                        key("Ctrl+Shift+Tab"),
                        "action_previous_chat",
                    ),
                    None,
                    ("Focus input", w.chat_view.focus_input, key("Ctrl+L"), "action_focus"),
                    ("Stop generating", w.chats.stop, key(Qt.Key.Key_Escape), "action_stop"),
                    ("Regenerate", w.chats.regenerate, key("Ctrl+R"), "action_regenerate"),
                    ("Answer the last question", w.chats.answer, None, "action_answer"),
                    None,
                    (
                        "Export as Markdown…",
                        lambda: with_chat(lambda i: w.export_chat(i, "markdown")),
                        None,
                        "",
                    ),
                    ("Export as JSON…", lambda: with_chat(lambda i: w.export_chat(i, "json")), None, ""),
                ],
            ),
            (
                "&Model",
                [
                    ("Load", lambda: w.plans.load(), None, "action_load"),
                    ("Unload", w.plans.unload, None, "action_unload"),
                    ("Copy llama-server command", exports),
                    ("Serve…", lambda: w.right_tabs.setCurrentWidget(w.server_panel), None, "action_serve"),
                ],
            ),
            (
                "&View",
                [
                    ("Chat", lambda: w.center_tabs.setCurrentWidget(w.chat_view), key("Alt+1"), ""),
                    ("Hub", lambda: w.center_tabs.setCurrentWidget(w.hub), key("Alt+2"), ""),
                    ("MCP servers", lambda: w.right_tabs.setCurrentWidget(w.mcp_panel), None, "action_view_mcp"),
                    None,
                    # Checkable (the window sets it): a narrow window hides the list, this brings it back.
                    ("Chat list", w.columns.toggle_chat_list, key("Ctrl+Shift+L"), "action_chat_list"),
                    ("Theme", themes),
                ],
            ),
            (
                "&Help",
                [
                    ("Show log", w.show_log, None, "action_show_log"),
                    ("About VRAM Pilot", lambda: dialogs.about(w.window()), None, ""),
                ],
            ),
        ],
    )
    # View > Theme: one of three, the current one checked (the window checks the saved one).
    group = QActionGroup(w.menuBar())
    for choice in THEME_CHOICES:
        act = named[f"theme_{choice}"]
        act.setCheckable(True)
        group.addAction(act)
    return named
