"""The window at its default size and at 800x600: the Plan panel fits its column, an unreadable
row can be removed, the user's line breaks show, stopping the server puts the Plan panel back, a
narrow window keeps a way to the chat list, and dialogs default to the safe answer.

Each test drives the real window offscreen on the embedded model, at the default size (1400x900)
and at 800x600 where the size matters.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QAbstractButton, QApplication, QMessageBox, QWidget
from pytestqt.qtbot import QtBot

from testkit.gguf_models import write_model
from tests import waits
from tests.ui.conftest import OpenWindow, activate, screenshot, settle
from tests.ui.test_window_never_stuck import broken_model
from vrampilot.paths import embedded_model_path
from vrampilot.ui.library.view import UNREADABLE
from vrampilot.ui.main_window import MainWindow
from vrampilot.ui.wrap import unwrapped

SIZES = [(1400, 900), (800, 600)]


def sized(open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]) -> MainWindow:
    w: MainWindow = open_window()
    w.resize(*size)
    QApplication.processEvents()
    qtbot.waitUntil(lambda: w.width() == size[0] and w.height() == size[1], timeout=5000)
    return w


def off_the_panel(w: MainWindow) -> list[str]:
    """Every shown control of the side panel (buttons, the library's columns, the labels) that
    reaches past the right edge of its scroll area's viewport."""
    viewport = w.right_scroll.viewport()
    width = viewport.width()
    content = w.right_scroll.widget()
    assert content is not None
    off = []
    for child in content.findChildren(QWidget):
        if not child.isVisibleTo(content) or child.width() == 0:
            continue
        right = child.mapTo(viewport, QPoint(child.width(), 0)).x()
        if right > width and (isinstance(child, QAbstractButton) or child.objectName()):
            off.append(f"{type(child).__name__} {child.objectName()!r} {getattr(child, 'text', lambda: '')()!r}")
    tree = w.library_view.tree
    header = tree.header()
    last = header.sectionViewportPosition(1) + header.sectionSize(1)
    if last > tree.viewport().width():
        off.append("the Models list's 'On this machine' column")
    return off


@pytest.mark.parametrize("size", SIZES)
def test_the_plan_panel_fits_its_column(
    open_window: OpenWindow, qtbot: QtBot, tmp_path: Path, size: tuple[int, int]
) -> None:
    w = sized(open_window, qtbot, size)
    # A file name of one long word (underscores do not break a line) was what widened panels most.
    long_name = write_model(tmp_path / "qwen2_5_coder_7b_instruct_abliterated_imatrix_q4_k_m.gguf", "llama")
    w.library.add_models([long_name])
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.spec.path == long_name, timeout=30000)
    qtbot.waitUntil(lambda: w.library_view.entry(long_name) is not None, timeout=30000)
    w.plan_view.cache_toggle.setChecked(True)  # the widest section, opened
    settle()
    scroll = w.right_scroll
    assert scroll.horizontalScrollBar().maximum() == 0, "the panel scrolls sideways"
    assert off_the_panel(w) == []
    for name in ("load", "unload", "export", "reset_pins", "cache_toggle"):
        assert w.plan_view.findChild(QAbstractButton, name) is not None
    assert len([b for b in w.plan_view.pins._auto.values() if b.isVisibleTo(w.plan_view)]) >= 8
    assert w.library_view.remove_b.isVisibleTo(w)
    # The name wraps at its separators rather than being cut; its text reads the same.
    assert long_name.name in unwrapped(w.plan_view.model_label.text())
    assert w.plan_view.model_label.height() > w.plan_view.model_label.fontMetrics().height() * 1.5
    screenshot(w, f"58-01-plan-panel-{size[0]}x{size[1]}")


def row_rect_center(w: MainWindow, path: Path) -> QPoint:
    tree = w.library_view.tree
    for i in range(tree.topLevelItemCount()):
        item = tree.topLevelItem(i)
        if item is not None and Path(item.data(0, Qt.ItemDataRole.UserRole)) == path:
            return tree.visualItemRect(item).center()
    raise AssertionError(f"{path.name} is not listed")


def test_an_unreadable_row_is_selected_and_removed_without_being_planned(
    open_window: OpenWindow, qtbot: QtBot, tmp_path: Path
) -> None:
    w = sized(open_window, qtbot, SIZES[0])
    embedded = embedded_model_path()
    broken = broken_model(tmp_path)
    noise = tmp_path / "noise.gguf"
    noise.write_bytes(bytes.fromhex("dd67919f") + os.urandom(4000))
    good = write_model(tmp_path / "good.gguf", "llama")
    w.library.add_models([broken, noise, good])
    qtbot.waitUntil(lambda: all(w.library_view.entry(p) is not None for p in (broken, noise, good)), timeout=30000)
    qtbot.waitUntil(lambda: not w.plans.planning(), timeout=30000)
    lib = w.library_view
    assert lib.entry(broken).badge == UNREADABLE and lib.entry(noise).badge == UNREADABLE  # type: ignore[union-attr]  # listed above
    # The row says why under the name, the reason first (the tooltip adds the path).
    row = lib.item_for(noise)
    assert row is not None and row.text(0).split("\n")[1].startswith("not a GGUF file")
    assert str(noise) in row.toolTip(0)
    w.plans.select_model(embedded)  # type: ignore[arg-type]  # the embedded model is installed
    qtbot.waitUntil(lambda: lib.selected_path() == embedded and not w.plans.planning(), timeout=30000)
    shown = w.plans.plan

    # A click selects the bad row and it stays selected; the plan shown stays the model's.
    qtbot.mouseClick(lib.tree.viewport(), Qt.MouseButton.LeftButton, pos=row_rect_center(w, broken))
    qtbot.waitUntil(lambda: "Could not read broken.gguf" in w.status.text(), timeout=10000)
    assert lib.selected_path() == broken and lib.remove_b.isEnabled()
    assert w.plans.model_path == embedded and w.plans.plan is shown
    assert "b'" not in w.status.text()
    # A model cut short is said with what the user can do about it, as the half-file message does,
    # and its path is not said again before the reason (the status bar cut the reason off).
    assert "the download or copy may be incomplete" in w.status.text()
    assert w.status.text().startswith("Could not read broken.gguf: tensor count") and str(broken) not in w.status.text()

    # The arrow keys go past it (the next one, unreadable too, is selected; then the good one plans).
    activate(qtbot, w)
    lib.tree.setFocus()
    qtbot.keyClick(lib.tree, Qt.Key.Key_Down)
    qtbot.waitUntil(lambda: "Could not read noise.gguf" in w.status.text(), timeout=10000)
    assert lib.selected_path() == noise
    assert "does not start with the letters GGUF" in w.status.text() and "b'" not in w.status.text()
    qtbot.keyClick(lib.tree, Qt.Key.Key_Down)
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.spec.path == good, timeout=30000)
    assert lib.selected_path() == good

    # Delete removes the selected bad row...
    qtbot.keyClick(lib.tree, Qt.Key.Key_Up)
    qtbot.waitUntil(lambda: lib.selected_path() == noise, timeout=5000)
    qtbot.keyClick(lib.tree, Qt.Key.Key_Delete)
    qtbot.waitUntil(lambda: lib.entry(noise) is None, timeout=30000)
    # ...and so does the context menu.
    lib.tree.customContextMenuRequested.emit(row_rect_center(w, broken))  # a right-click on its row
    assert lib.selected_path() == broken and lib.context_menu is not None
    remove = next(a for a in lib.context_menu.actions() if a.objectName() == "library_remove")
    assert remove.isEnabled()
    lib.context_menu.close()
    remove.trigger()
    qtbot.waitUntil(lambda: lib.entry(broken) is None, timeout=30000)
    assert w.plans.plan is not None and w.plans.plan.spec.path == good
    screenshot(w, "58-03-unreadable-rows-removed")


def test_a_fixed_file_or_a_good_one_clears_the_old_failure(
    open_window: OpenWindow, qtbot: QtBot, tmp_path: Path
) -> None:
    w = sized(open_window, qtbot, SIZES[0])
    embedded = embedded_model_path()
    assert embedded is not None
    broken = broken_model(tmp_path)
    w.library.add_models([broken])
    qtbot.waitUntil(lambda: w.chat_view.banner_visible(), timeout=10000)
    assert "Could not read broken.gguf" in w.chat_view.banner_text.text()
    qtbot.waitUntil(lambda: (e := w.library_view.entry(broken)) is not None and e.badge == UNREADABLE, timeout=30000)

    # The download finishes (the file is whole now); clicking its row plans it, the row and banner update.
    shutil.copyfile(embedded, broken)
    qtbot.mouseClick(w.library_view.tree.viewport(), Qt.MouseButton.LeftButton, pos=row_rect_center(w, broken))
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.spec.path == broken, timeout=30000)
    qtbot.waitUntil(lambda: (e := w.library_view.entry(broken)) is not None and e.badge != UNREADABLE, timeout=30000)
    assert not w.chat_view.banner_visible()

    # Another bad file, then a good one opened: the banner about the bad one goes.
    other = tmp_path / "half.gguf"
    other.write_bytes(embedded.read_bytes()[:5000])
    w.library.add_models([other])
    qtbot.waitUntil(lambda: w.chat_view.banner_visible(), timeout=10000)
    w.library.add_models([embedded])
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.spec.path == embedded, timeout=30000)
    assert not w.chat_view.banner_visible()


@pytest.mark.parametrize("size", SIZES)
def test_the_users_line_breaks_show(open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]) -> None:
    w = sized(open_window, qtbot, size)
    text = "Fix this list:\napples 3\npears 2\n\n    def f(x):\n        return x * 2"
    chat = w.ctx.conversations.create(model_path=None)
    w.ctx.conversations.ask(chat.id, text)
    w.chats.refresh_list()
    w.chats.open_chat(chat.id)
    QApplication.processEvents()
    body = w.chat_view.messages()[0].body
    assert body.toPlainText() == text  # every line as typed, the indentation too
    assert body.document().blockCount() == text.count("\n") + 1
    assert w.chat_view.title_text() == "Fix this list:"
    screenshot(w, f"58-04-line-breaks-{size[0]}x{size[1]}")


@pytest.mark.slow
def test_stop_server_puts_the_plan_panel_back(open_window: OpenWindow, qtbot: QtBot) -> None:
    from tests.ui.test_server_panel import serve_from_the_window

    w = sized(open_window, qtbot, SIZES[0])
    serve_from_the_window(w, qtbot)
    assert "Running in llama-server" in w.plan_view.load_status.text()
    w.server.stop()
    waits.until(qtbot, lambda: w.server.state == "stopped", cpu_s=30)
    assert "Running in llama-server" not in w.plan_view.load_status.text()
    assert w.plan_view.load_status.text() == "Not loaded"


def answer_next_dialog(qtbot: QtBot, seen: list[tuple[str, str]]) -> None:
    """Press Enter in the next modal message box once it shows, as a user would; `seen` gets its
    text and the label of its default button (read while it is up: a static box deletes itself)."""

    def press() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, press)
            return
        default = box.defaultButton()
        seen.append((box.text(), default.text() if default is not None else ""))
        qtbot.keyClick(box, Qt.Key.Key_Return)

    QTimer.singleShot(0, press)


def test_about_has_no_literal_backslash_n_and_risky_questions_default_to_no(
    open_window: OpenWindow, qtbot: QtBot
) -> None:
    w = sized(open_window, qtbot, SIZES[0])
    seen: list[tuple[str, str]] = []
    answer_next_dialog(qtbot, seen)
    about = next(a for a in w.findChildren(QAction) if a.text() == "About VRAM Pilot")
    about.trigger()
    assert seen and "\\n" not in seen[0][0] and "\n" in seen[0][0]

    seen.clear()
    answer_next_dialog(qtbot, seen)
    assert w.confirm("Load a plan that does not fit?", "It does not fit.\n\nLoad anyway?") is False
    assert seen and seen[0][1].replace("&", "") == "No"


@pytest.mark.parametrize("size", SIZES)
def test_a_narrow_window_gives_the_chat_list_a_way_back(
    open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]
) -> None:
    w = sized(open_window, qtbot, size)
    toggle = w.actions_by_name["action_chat_list"]
    narrow = size[0] < 900
    assert w.chat_list.isHidden() is narrow and toggle.isChecked() is not narrow
    activate(qtbot, w)
    w.chat_view.input.setFocus()
    toggle.trigger()  # View > Chat list
    assert w.chat_list.isHidden() is not narrow and toggle.isChecked() is narrow
    toggle.trigger()
    assert w.chat_list.isHidden() is narrow
    # Ctrl+F shows the list when it is hidden, and types into its search box.
    w.columns.set_chat_list_shown(False)
    qtbot.keyClick(w.chat_view.input, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: w.chat_list.search.hasFocus(), timeout=2000)
    assert w.chat_list.isVisible() and toggle.isChecked()
    assert w.splitter.sizes()[0] >= 20 * w.fontMetrics().averageCharWidth()
    qtbot.keyClicks(w.chat_list.search, "rivers")
    assert w.chat_list.search.text() == "rivers"
    screenshot(w, f"58-06-chat-list-back-{size[0]}x{size[1]}")
