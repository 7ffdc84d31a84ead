"""Text the window shows whole at the default size (1400x900) and at 800x600: every cell of the
Alternatives table (no "16K contex…" beside a wide memory column, no scrolling both ways), the RAM
bar's caption and every row of its legend, the overflow choices under their text, and a long
status cut with an ellipsis only after what matters.

Each test drives the real window offscreen on the embedded model and saves a screenshot.
"""

from __future__ import annotations

from collections import Counter

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QStyle
from pytestqt.qtbot import QtBot

from tests.ui.conftest import OpenWindow, screenshot, settle
from tests.ui.test_window_fits_both_sizes import SIZES, sized


@pytest.mark.parametrize("size", SIZES)
def test_the_alternatives_show_every_cell_whole(open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]) -> None:
    w = sized(open_window, qtbot, size)
    settle()
    table = w.plan_view.alternatives
    assert table.rowCount() > 0
    fm = table.fontMetrics()
    # What Qt's item delegate leaves of a cell for its text: a margin on each side.
    margin = table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1
    cut = []
    for c in range(table.columnCount()):
        if table.isColumnHidden(c):
            continue
        room = table.columnWidth(c) - 2 * margin
        for r in range(table.rowCount()):
            item = table.item(r, c)
            assert item is not None
            need = fm.boundingRect(QRect(0, 0, room, 10_000), Qt.TextFlag.TextWordWrap, item.text())
            if need.width() > room or need.height() > table.rowHeight(r):
                cut.append(f"row {r} column {c}: {item.text()!r}")
    assert cut == [], cut
    # The whole table shows: it neither scrolls sideways nor down (the panel scrolls).
    assert table.horizontalScrollBar().maximum() == 0 and table.verticalScrollBar().maximum() == 0
    last = table.horizontalHeader().sectionViewportPosition(4) + table.columnWidth(4)
    assert last <= table.viewport().width()
    if size == SIZES[0]:  # at the default size the prompt speed has room too
        assert not table.isColumnHidden(3)
    w.right_scroll.ensureWidgetVisible(w.plan_view.alternatives_note)
    screenshot(w, f"58d-alternatives-{size[0]}x{size[1]}")


def ink_rows(image_rows: list[list[QColor]], background: QColor) -> list[int]:
    """Which of the rows hold a pixel that is not the background (text or a legend's swatch)."""

    def far(c: QColor) -> bool:
        return (
            abs(c.red() - background.red()) + abs(c.green() - background.green()) + abs(c.blue() - background.blue())
            > 60
        )

    return [i for i, row in enumerate(image_rows) if any(far(c) for c in row)]


@pytest.mark.parametrize("size", SIZES)
def test_the_ram_bar_shows_its_caption_and_legend_whole(
    open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]
) -> None:
    w = sized(open_window, qtbot, size)
    settle()
    bar = w.plan_view.ram_bar
    usage = bar.data()
    assert usage is not None and usage.server is not None  # the hatched llama-server parts: the longest legend
    # Nothing is cut at the bottom: the last rows of the bar's pixels are background.
    image = bar.grab().toImage()
    colors = Counter(image.pixel(x, y) for x in range(image.width()) for y in range(image.height()))
    background = QColor.fromRgb(colors.most_common(1)[0][0])
    bottom = [[image.pixelColor(x, y) for x in range(image.width())] for y in range(image.height() - 2, image.height())]
    assert ink_rows(bottom, background) == [], "the legend's last row is cut at the bottom"
    # The caption wraps at its words within the bar's width, every word of it shown.
    layout = bar.bar_layout(bar.width())
    caption = usage.usage().caption
    assert " ".join(layout.caption_lines) == caption
    assert all(bar.fontMetrics().horizontalAdvance(line) <= bar.width() - 2 for line in layout.caption_lines)
    assert bar.height() >= layout.height
    # Every legend entry shows its size, inside the bar.
    for text, _seg, x, _y in layout.legend:
        assert text.endswith(("B", "iB")) and x + bar.fontMetrics().horizontalAdvance(text) <= bar.width()
    w.right_scroll.ensureWidgetVisible(bar)
    screenshot(w, f"58d-ram-bar-{size[0]}x{size[1]}")


@pytest.mark.parametrize("size", SIZES)
def test_the_overflow_choices_wrap_under_their_text_and_take_no_room_from_the_plan(
    open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]
) -> None:
    """At 800x600 the three choices in one row set the chat column's minimum width: the Plan
    panel lost its room (its tabs and text cut at the right) and the banner's text became a
    one-word-wide strip cut at the bottom."""
    from dataclasses import replace

    from PySide6.QtWidgets import QPushButton

    from tests.ui.conftest import seed_prefs

    seed_prefs(max_tokens=16)
    w = sized(open_window, qtbot, size)
    w.plans.set_pins(replace(w.plans.pins, n_ctx=512))
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.settings.n_ctx == 512, timeout=5000)
    settle()
    columns = w.splitter.sizes()
    chat = w.ctx.store.create_chat()
    w.ctx.store.add_message(chat.id, "user", "Tell me about boats. " * 60)
    w.ctx.store.add_message(chat.id, "assistant", "Boats float.")
    w.ctx.store.add_message(chat.id, "user", "And ships?")
    w.ctx.store.add_message(chat.id, "assistant", "Ships are big boats.")
    w.chats.refresh_list()
    w.chats.open_chat(chat.id)
    w.chat_view.input.setPlainText("Now about trains: " + "trains run on rails. " * 35)
    qtbot.mouseClick(w.chat_view.send_button, Qt.MouseButton.LeftButton)
    view = w.chat_view
    qtbot.waitUntil(lambda: view.banner_visible() and "overflow" in view.banner_text.text(), timeout=60000)
    settle()
    buttons = [b for b in view.banner.findChildren(QPushButton) if b.isVisibleTo(view.banner)]
    assert len(buttons) == 3, [b.text() for b in buttons]
    # The columns stay as they were: the banner takes no width from the Plan panel.
    assert w.splitter.sizes() == columns
    assert w.right_scroll.horizontalScrollBar().maximum() == 0
    # The text is shown whole at a readable width, every choice inside the banner.
    label = view.banner_text
    assert label.width() >= 30 * label.fontMetrics().averageCharWidth()
    assert label.height() >= label.heightForWidth(label.width())
    inside = view.banner.rect()
    for b in buttons:
        corner = b.mapTo(view.banner, b.rect().bottomRight())
        assert inside.contains(corner) and b.width() >= b.sizeHint().width(), b.text()
    screenshot(w, f"58d-overflow-banner-{size[0]}x{size[1]}")


@pytest.mark.parametrize("size", SIZES)
def test_a_long_status_is_cut_with_an_ellipsis_after_what_matters(
    open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]
) -> None:
    """A profile's export said what the line is after the file name, and the status bar clipped it
    mid-word ("… (SmolLM2-135M-Instruct.Q4_1.g") at 800x600, and at 1400x900 before "threads"."""
    from tests.ui.test_window_colours_and_numbers import choose_profile

    w = sized(open_window, qtbot, size)
    choose_profile(w, qtbot)
    w.plans.copy_command("bash")
    settle()
    status = w.status
    full = status.text()
    assert full.startswith("Copied the llama-server command for bash: a portable line for that GPU's machine")
    assert status.toolTip() == full  # the whole line, on hover
    shown = status.shown_text()
    room = status.contentsRect().width()
    assert status.fontMetrics().horizontalAdvance(shown) <= room
    if status.fontMetrics().horizontalAdvance(full) > room:
        assert shown.endswith("…") and full.startswith(shown[:-1])
    assert "a portable line" in shown
    screenshot(w, f"58d-status-{size[0]}x{size[1]}")
