"""Colours and numbers the window shows: syntax colours in code blocks, a theme the user can choose
(System, Light, Dark), a pinned mark in the Models list, a profile's plan beside a loaded model
said plainly, no rate a reply did not measure, no speed rounded to 0, and a slow measurement kept
at a start that is not quiet.

Each test drives the real window offscreen (on the embedded model where one is needed), at the
default size (1400x900) and at 800x600 where the layout matters, and saves a screenshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QTextCursor
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from tests.ui.conftest import OpenWindow, screenshot, settle
from tests.ui.test_window_fits_both_sizes import SIZES, sized
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.ui.chat.markdown_view import MarkdownView
from vrampilot.ui.main_window import MainWindow
from vrampilot.ui.theme import ThemeChoice, apply_theme, code_colors, code_shade, is_dark
from vrampilot.units import format_count

REPLY = (
    "Here is the function:\n\n"
    "```python\n"
    "def double(x):  # twice x\n"
    '    return "<b>not bold</b>" if x is None else x * 2\n'
    "```\n\n"
    'And <span style="color:red">raw HTML</span> stays text.'
)


@pytest.fixture
def system_theme_after() -> Iterator[None]:
    """Back to following the (offscreen, light) system after a test that chose a theme."""
    yield
    apply_theme(cast(QApplication, QApplication.instance()), "system")
    QGuiApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Light)


def show_reply(w: MainWindow, text: str = REPLY) -> MarkdownView:
    chat = w.ctx.conversations.create(model_path=None)
    w.ctx.conversations.ask(chat.id, "Write a function that doubles x")
    w.ctx.conversations.add_reply(chat.id, text, {})
    w.chats.refresh_list()
    w.chats.open_chat(chat.id)
    QApplication.processEvents()
    return w.chat_view.messages()[-1].body


def color_of(view: MarkdownView, needle: str) -> str:
    """The text colour of the first character of `needle` in the view."""
    doc = view.document()
    at = doc.toPlainText().index(needle)
    cursor = QTextCursor(doc)
    cursor.setPosition(at + 1)  # the format of the character before the cursor
    return cursor.charFormat().foreground().color().name()


def contrast(a: QColor, b: QColor) -> float:
    """WCAG's contrast ratio of two colours."""

    def lum(c: QColor) -> float:
        def ch(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

        return 0.2126 * ch(c.redF()) + 0.7152 * ch(c.greenF()) + 0.0722 * ch(c.blueF())

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("size", SIZES)
def test_code_blocks_are_coloured_and_html_stays_text(
    open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int], system_theme_after: None
) -> None:
    w = sized(open_window, qtbot, size)
    body = show_reply(w)
    text = body.toPlainText()
    # The model's HTML is shown as written, inside the code block and outside it.
    assert '"<b>not bold</b>"' in text and '<span style="color:red">raw HTML</span>' in text
    themes: tuple[ThemeChoice, ...] = ("light", "dark")
    for theme in themes:
        w.set_theme(theme)
        dark = theme == "dark"
        qtbot.waitUntil(lambda: is_dark(body.palette()) == dark, timeout=3000)  # noqa: B023  # waited on at once
        colors = {k: c.name() for k, c in code_colors(body.palette()).items()}
        assert color_of(body, "def double") == colors["keyword"]
        assert color_of(body, "return") == colors["keyword"]
        assert color_of(body, '"<b>') == colors["string"]
        assert color_of(body, "# twice") == colors["comment"]
        assert color_of(body, "None") == colors["constant"]
        assert color_of(body, "2\n") == colors["number"]
        assert color_of(body, "double(") != colors["keyword"]  # a name is left as text
        # Readable on the block's shade: WCAG's 4.5:1 for body text, in both themes.
        shade = code_shade(body.palette())
        assert min(contrast(QColor(c), shade) for c in colors.values()) >= 4.5
        screenshot(w, f"58c-code-{theme}-{size[0]}x{size[1]}")
    # Copy code still copies the code as written.
    assert body.code_blocks() == ['def double(x):  # twice x\n    return "<b>not bold</b>" if x is None else x * 2']


def test_theme_menu_system_light_dark_is_kept_and_follows_the_system(
    open_window: OpenWindow, qtbot: QtBot, system_theme_after: None
) -> None:
    hints = QGuiApplication.styleHints()
    w = sized(open_window, qtbot, SIZES[0])
    actions = {c: w.actions_by_name[f"theme_{c}"] for c in ("system", "light", "dark")}
    assert actions["system"].isChecked() and all(a.isCheckable() for a in actions.values())
    assert actions["dark"].parent() is not None
    body = show_reply(w)

    actions["dark"].trigger()  # View > Theme > Dark
    qtbot.waitUntil(lambda: is_dark(QApplication.palette()) and is_dark(body.palette()), timeout=3000)
    assert actions["dark"].isChecked() and not actions["system"].isChecked()
    assert color_of(body, "def") == code_colors(body.palette())["keyword"].name() == "#ff7b72"
    # The system turning light does not override the user's choice.
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    QApplication.processEvents()
    assert is_dark(QApplication.palette())
    screenshot(w, "58c-theme-dark")

    actions["system"].trigger()  # following the system again: it says dark, then light
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    qtbot.waitUntil(lambda: is_dark(QApplication.palette()), timeout=3000)
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    qtbot.waitUntil(lambda: not is_dark(QApplication.palette()) and not is_dark(body.palette()), timeout=3000)
    assert color_of(body, "def") == "#b31d28"

    # Light while the system is dark stays light; the choice is kept for the next start.
    actions["light"].trigger()
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    QApplication.processEvents()
    assert not is_dark(QApplication.palette())
    actions["dark"].trigger()
    w.close()
    again = open_window()
    qtbot.waitUntil(lambda: is_dark(QApplication.palette()), timeout=3000)
    assert again.actions_by_name["theme_dark"].isChecked()


def mark_of(w: MainWindow, path: Path) -> tuple[str, str]:
    item = w.library_view.item_for(path)
    assert item is not None, f"{path.name} is not listed"
    return item.text(0), item.toolTip(0)


@pytest.mark.parametrize("size", SIZES)
def test_models_list_marks_a_model_with_pins(open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]) -> None:
    embedded = embedded_model_path()
    assert embedded is not None
    w = sized(open_window, qtbot, size)
    qtbot.waitUntil(lambda: w.library_view.entry(embedded) is not None, timeout=30000)
    text, tip = mark_of(w, embedded)
    assert "pinned" not in text and "Pinned" not in tip
    # Pinning threads in the Plan panel marks the row at once, its tooltip naming the pin.
    w.plans.set_pins(replace(w.plans.pins, n_threads=1, n_ctx=1024))
    text, tip = mark_of(w, embedded)
    assert text.split("\n")[0].endswith(" · pinned")
    assert "Pinned by you for this model" in tip and "Threads 1" in tip and "Context 1K" in tip
    assert w.library_view.pinned(embedded) == ["Context 1K", "Threads 1"]
    settle()
    screenshot(w, f"58c-models-pinned-{size[0]}x{size[1]}")
    # The mark is there at the next start (pins are remembered per model), and goes with the pins.
    w.close()
    again = sized(open_window, qtbot, size)
    qtbot.waitUntil(lambda: again.library_view.entry(embedded) is not None, timeout=30000)
    assert mark_of(again, embedded)[0].split("\n")[0].endswith(" · pinned")
    again.plans.set_pins(Pins())
    text, tip = mark_of(again, embedded)
    assert "pinned" not in text and "Pinned" not in tip


# -- the small ones ------------------------------------------------------------------------------


def choose_profile(w: MainWindow, qtbot: QtBot) -> str:
    box = w.plan_view.target_box
    i = next(i for i in range(box.count()) if str(box.itemData(i)).startswith("profile:"))
    box.setCurrentIndex(i)
    box.activated.emit(i)
    qtbot.waitUntil(lambda: w.plans.plan is not None and w.plans.plan.target.has_gpu, timeout=10000)
    return str(box.itemData(i)).removeprefix("profile:")


def send(w: MainWindow, qtbot: QtBot, text: str) -> None:
    from tests import waits
    from vrampilot.ui.chat.controller import ChatState

    n = len(w.chat_view.messages())
    w.chat_view.input.setPlainText(text)
    qtbot.keyClick(w.chat_view.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(w.chat_view.messages()) == n + 2, cpu_s=120)


@pytest.mark.slow
def test_a_profile_shown_over_a_loaded_model_says_what_the_chat_uses_and_switches_nothing_silently(
    open_window: OpenWindow, qtbot: QtBot
) -> None:
    from tests import waits
    from tests.ui.conftest import activate, seed_prefs

    seed_prefs(max_tokens=4)
    w = sized(open_window, qtbot, SIZES[0])
    activate(qtbot, w)
    w.plans.load()
    waits.until(qtbot, lambda: w.plans.is_loaded(), cpu_s=60)
    loaded = w.plans.load_result
    profile = choose_profile(w, qtbot)
    status = w.plan_view.load_status.text()
    # Load is disabled (another GPU's plan): the line says what the chat uses, not "press Load".
    assert not w.plan_view.load_button.isEnabled()
    assert "press Load" not in status
    assert "planned for this machine: the chat replies with it" in status and profile in status
    w.right_scroll.ensureWidgetVisible(w.plan_view.load_status)
    screenshot(w, "58c-profile-over-loaded")
    # Sending replies with the loaded model; "Plan for" stays on the profile.
    send(w, qtbot, "Hi")
    assert w.plans.profile_shown() == profile and w.plans.load_result is loaded
    # Nothing loaded: sending loads this machine's plan and says so where the user looks.
    w.plans.unload()
    waits.until(qtbot, lambda: not w.plans.is_loaded(), cpu_s=30)
    banners: list[str] = []
    w.plans.load_state_changed.connect(lambda _s: banners.append(w.chat_view.banner_text.text()))
    send(w, qtbot, "Hi again")
    assert any(f"the plan shown was for {profile}" in b for b in banners), banners
    assert w.plans.profile_shown() is None and w.plan_view.target_box.currentData() == "machine"


def test_a_reply_line_shows_no_rate_it_did_not_measure(qtbot: QtBot) -> None:
    from vrampilot.ui.chat.controller import summary_line
    from vrampilot.ui.chat.view import ChatView

    view = ChatView()
    qtbot.addWidget(view)
    base = {"prompt_tokens": 12, "ttft_s": 0.5, "context_used": 13, "n_ctx": 1024, "stop_reason": "cancelled"}
    one = view.add_message(1, "assistant", "The", summary_line({**base, "completion_tokens": 1, "decode_tps": 0.0}))
    none = view.add_message(2, "assistant", "", summary_line({**base, "completion_tokens": 0, "decode_tps": 0.0}))
    assert "tokens/s" not in one.stats.text() and "1 token ·" in one.stats.text()
    assert none.stats.text() == "stopped before the first token"
    full = summary_line({**base, "completion_tokens": 24, "decode_tps": 31.25, "stop_reason": "eos"})
    assert "31.2 tokens/s" in full and "24 tokens" in full


@pytest.mark.parametrize("size", SIZES)
def test_the_plan_never_rounds_a_speed_to_0_and_alternatives_say_an_equal_speed_once(
    open_window: OpenWindow, qtbot: QtBot, size: tuple[int, int]
) -> None:
    w = sized(open_window, qtbot, size)
    plan = w.plans.plan
    assert plan is not None
    # Every alternative keeps the layers where they are (a CPU plan): at the start they generate at
    # about the plan's speed (the cache type moves it a little, by this machine's measured rates),
    # and only the context full tells them apart.
    start = format_count(plan.speed.decode_tps, 1)
    same_start = all(format_count(a.speed.decode_tps, 1) == start for a in plan.alternatives)
    table = w.plan_view.alternatives
    shown = [table.item(r, 2).text() for r in range(table.rowCount())]  # type: ignore[union-attr]  # each row has its cells
    assert len(set(shown)) > 1, shown
    assert table.horizontalHeaderItem(2).text().replace("\n", " ") == "Full ctx t/s"  # type: ignore[union-attr]  # set in the view (on two lines)
    note = w.plan_view.alternatives_note.text()
    said = f"every alternative generates {start} tokens/s" if same_start else "each row's tooltip has its own"
    assert said in note and note.count("tokens/s") == 1, note
    # A prompt speed under half a token a second with the context full reads as itself, not "0".
    slow = replace(plan, speed=replace(plan.speed, prefill_tps_full_ctx=0.37))
    w.plan_view.set_plan(slow)
    assert "(0.37 filling the context)" in w.plan_view.speed.text()
    w.plan_view.set_plan(plan)
    settle()
    w.right_scroll.ensureWidgetVisible(w.plan_view.alternatives_note)
    screenshot(w, f"58c-alternatives-{size[0]}x{size[1]}")


def test_a_slow_measurement_is_kept_at_a_start_that_is_not_quiet(
    open_window: OpenWindow, qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vrampilot.speed import (
        PROBE_PACE_READINGS,
        MachineSpeed,
        PaceReading,
        RateAt,
        detect_measured_machine,
        load_machine_speed,
        update_machine_speed,
    )
    from vrampilot.ui.plan.speed_controller import SpeedController

    fp = detect_measured_machine().speed.fingerprint  # type: ignore[union-attr]  # the home fixture saved a record

    def slow(m: MachineSpeed) -> MachineSpeed:
        assert m.probe is not None
        readings = tuple(PaceReading(1, 3.0) for _ in range(PROBE_PACE_READINGS))
        return replace(m, probe=replace(m.probe, pace_ms=(RateAt(1, 4.0),)), paces=readings)

    before = update_machine_speed(fp, slow)
    assert before.probe_read_slow and before.probe is not None
    # Any use of the CPU by others counts as busy: this start is never quiet enough.
    monkeypatch.setattr(SpeedController, "quiet_share", 0.0)
    w = open_window(wait_plan=False)
    qtbot.waitUntil(lambda: "Kept the measurement of" in w.status.text(), timeout=30000)
    assert not w.plans.speed.probing
    assert f"Kept the measurement of {before.probe.date}: other programs use" in w.status.text()
    assert "measuring" not in w.plan_view.speed.text()
    assert load_machine_speed(fp).probe == before.probe


def test_an_image_a_reply_links_is_named_not_shown(qtbot: QtBot, tmp_path: Path) -> None:
    from PySide6.QtGui import QImage

    picture = tmp_path / "private.png"
    image = QImage(40, 40, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    assert image.save(str(picture))
    view = MarkdownView()
    qtbot.addWidget(view)
    view.resize(400, 200)
    view.set_markdown(f"Look: ![x]({picture.as_uri()}) and ![y]({picture})")
    assert view.toPlainText() == f"Look: [image not shown: {picture.as_uri()}] and [image not shown: {picture}]"
    shot = view.grab().toImage()
    red = QColor("red")
    assert not any(shot.pixelColor(x, y) == red for x in range(0, shot.width(), 2) for y in range(shot.height()))
