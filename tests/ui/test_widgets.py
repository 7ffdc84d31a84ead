"""The chat and plan widgets on their own: Markdown, memory bar, sampling panel, input keys."""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase, QTextBlock, QTextDocument, QTextFormat
from pytestqt.qtbot import QtBot

from tests.ui.conftest import screenshot
from vrampilot.engine import SamplingParams
from vrampilot.planner.memory.breakdown import Components
from vrampilot.ui.chat.markdown_view import MarkdownView
from vrampilot.ui.chat.view import ChatView, InputEdit, SamplingPanel
from vrampilot.ui.plan.pin_controls import PinControls, context_steps
from vrampilot.ui.stacked_bar import BarData, MemoryBar
from vrampilot.units import MIB

MD = """Here is **bold** and `inline`.

```python
def add(a, b):
    return a + b
```

- one
- two
"""


def test_markdown_renders_code_blocks_in_monospace_on_a_shade(qtbot: QtBot) -> None:
    view = MarkdownView()
    qtbot.addWidget(view)
    view.resize(500, 100)
    view.set_markdown(MD)
    doc = view.document()
    assert "def add(a, b):" in doc.toPlainText() and "**" not in doc.toPlainText()
    code = [
        b
        for b in _blocks(doc)
        if b.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence) or "return a + b" in b.text()
    ]
    assert code, "no code block found"
    system_mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
    for b in code:
        assert b.blockFormat().background().style() != Qt.BrushStyle.NoBrush
        # What the view asks for, not what this machine's fonts happen to report.
        fmt = b.begin().fragment().charFormat()
        assert fmt.fontFixedPitch()
        assert fmt.font().styleHint() == QFont.StyleHint.Monospace
        assert system_mono in (fmt.fontFamilies() or [fmt.fontFamily()])
    # Grows with its text: no inner scroll bar, height follows the document.
    assert view.height() >= doc.size().height()


def test_chat_view_shows_markdown_messages_and_a_stats_line(qtbot: QtBot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.add_message(0, "user", "Show me code")
    reply = view.begin_reply(1)
    for piece in ("Sure:\n\n```python\n", "print('hi')\n", "```\n"):
        view.append_reply_text(piece)
    qtbot.waitUntil(lambda: "print('hi')" in reply.body.document().toPlainText(), timeout=2000)
    view.finish_reply(view.streamed_text(), "12 prompt tokens · 30.0 tokens/s")
    assert reply.stats.text().endswith("30.0 tokens/s") and reply.stats.isVisibleTo(view)
    assert reply.regenerate_button.isVisibleTo(view)
    assert not view.messages()[0].regenerate_button.isVisibleTo(view)
    screenshot(view, "10-markdown-message")


def test_memory_bar_caption_and_overflow(qtbot: QtBot) -> None:
    bar = MemoryBar()  # a widget: the qtbot fixture makes the QApplication it needs (alone, it aborted)
    qtbot.addWidget(bar)
    fits = BarData("RAM", Components(weights_bytes=300 * MIB, kv_bytes=100 * MIB), 1000 * MIB)
    assert fits.caption() == "RAM: 400.00 MiB of 1000.00 MiB (40%)" and not fits.over
    over = BarData("GPU", Components(weights_bytes=900 * MIB, kv_bytes=300 * MIB, margin_bytes=100 * MIB), 1000 * MIB)
    assert over.over and "300.00 MiB over" in over.caption()
    assert [k for k, _l, _n in over.segments()] == ["weights", "kv", "margin"]
    bar.set_data(over)
    assert "KV cache: 300.00 MiB" in bar.toolTip()


def test_sampling_panel_round_trips(qtbot: QtBot) -> None:
    panel = SamplingPanel()
    qtbot.addWidget(panel)
    p = SamplingParams(temperature=0.3, top_p=0.9, top_k=20, min_p=0.1, repeat_penalty=1.2, max_tokens=77, seed=5)
    panel.set_params(p)
    assert panel.params() == p
    with qtbot.waitSignal(panel.changed) as sig:
        panel.seed.setValue(-1)
    assert sig.args[0].seed is None  # "random"


def test_enter_sends_only_when_chosen(qtbot: QtBot) -> None:
    edit = InputEdit()
    qtbot.addWidget(edit)
    sent: list[int] = []
    edit.send.connect(lambda: sent.append(1))
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert sent == [] and edit.toPlainText() == "\n"
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert sent == [1]
    edit.enter_sends = True
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert sent == [1, 1]
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert sent == [1, 1]


def test_context_steps_cover_the_trained_length() -> None:
    steps = context_steps(8192)
    assert steps[0] == 512 and 8192 in steps and steps == sorted(steps) and steps[-1] == 16384
    assert 131072 in context_steps(131072) and 40960 in context_steps(40960)
    # A file may claim any trained length; the slider offers none past what llama.cpp takes.
    assert context_steps(4_000_000_000)[-1] == 1 << 20


def test_each_code_block_has_a_copy_link_that_copies_just_that_code(qtbot: QtBot) -> None:
    """LM Studio and Jan users looked for a copy button on code blocks (issue 58, expected)."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QGuiApplication

    view = MarkdownView()
    qtbot.addWidget(view)
    view.resize(500, 100)
    view.show()
    reply = "Two ways:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nand\n\n~~~sh\necho hi\n~~~\n"
    view.set_markdown(reply)
    assert view.code_blocks() == ["def add(a, b):\n    return a + b", "echo hi"]
    assert view.document().toPlainText().count("Copy code") == 2
    assert view.markdown() == reply  # the message's own Copy still copies the reply as written
    view.anchorClicked.emit(QUrl("vrampilot-copy:1"))
    assert QGuiApplication.clipboard().text() == "echo hi"
    view.anchorClicked.emit(QUrl("vrampilot-copy:0"))
    assert QGuiApplication.clipboard().text() == "def add(a, b):\n    return a + b"
    assert view.toPlainText().startswith("Two ways:")  # following the link left the view as it was
    screenshot(view, "code-copy").replace("/tmp/w58b-code-copy.png")


def test_a_pinned_setting_looks_pinned(qtbot: QtBot) -> None:
    """Pinned and automatic rows looked the same (issue 58, low): a pinned row's label is bold and
    its button says "pinned"; pressing it gives the choice back and the row looks automatic again."""
    pins = PinControls()
    qtbot.addWidget(pins)
    pins.show()
    button, label = pins._auto["n_ctx"], pins._labels["n_ctx"]
    assert button.text() == "auto" and not label.font().bold()
    with qtbot.waitSignal(pins.pins_changed):
        pins.ctx_slider.setValue(pins.ctx_slider.value() + 1)
    assert button.text() == "pinned ×" and label.font().bold() and "remembered for this model" in button.toolTip()
    assert pins._auto["type_k"].text() == "auto" and not pins._labels["type_k"].font().bold()
    screenshot(pins, "pinned-row").replace("/tmp/w58b-pinned.png")
    with qtbot.waitSignal(pins.pins_changed):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert button.text() == "auto" and not label.font().bold() and pins.pins().n_ctx is None


def test_a_search_result_says_where_it_matched_with_its_date_and_the_match_marked(qtbot: QtBot) -> None:
    """A title and the matching message looked the same, so results looked duplicated (issue 58, low)."""
    import time

    from vrampilot.storage import ChatSummary
    from vrampilot.ui.chat.chat_list import ChatList
    from vrampilot.ui.chat.search_results import HTML_ROLE

    chats = ChatList()
    qtbot.addWidget(chats)
    chats.resize(260, 300)
    chats.show()
    now = time.time()
    found = [
        ChatSummary(1, "Pasta for four", "m.gguf", now, 4, "…cook the pasta until al dente…"),
        ChatSummary(2, "Pasta shapes", "m.gguf", now, 2, ""),
    ]
    chats.set_chats(found, None, query="pasta")
    first, second = (chats.list.item(i) for i in range(2))
    assert first.text().endswith(" · in a message: …cook the pasta until al dente…")
    assert second.text().endswith(" · in the title") and time.strftime("%H:%M") in second.text()
    html = str(first.data(HTML_ROLE))
    assert html.startswith("<b><b style='background-color:#fff3a0; color:black'>Pasta</b> for four</b>")
    assert "the <b style='background-color:#fff3a0; color:black'>pasta</b> until" in html
    screenshot(chats, "search-results").replace("/tmp/w58b-search.png")
    chats.set_chats(found, None)  # no search: plain rows, date and count
    assert chats.list.item(1).text().endswith(" · 2 messages") and chats.list.item(1).data(HTML_ROLE) is None


def _blocks(doc: QTextDocument) -> Iterator[QTextBlock]:
    b = doc.begin()
    while b.isValid():
        yield b
        b = b.next()
