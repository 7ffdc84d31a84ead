"""The Server tab on the real window: start the bundled llama-server with the shown plan, chat
through it (the model in memory once), watch its process in the meters, stop, and a crash that
says why; the network key on no command line. The openai client talks to the same server the app
started."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from tests import waits
from tests.ui.conftest import OpenWindow, open_chat, screenshot, seed_prefs
from vrampilot.server import free_port
from vrampilot.server.process import is_alive, lan_address
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow
from vrampilot.units import format_count

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")


def test_serve_from_the_app_chat_through_it_and_stop(open_window: OpenWindow, qtbot: QtBot) -> None:
    seed_prefs(max_tokens=16)
    w: MainWindow = open_window()
    panel = w.server_panel
    w.right_tabs.setCurrentWidget(panel)
    assert panel.stop.isEnabled() is False and panel.key.text() == ""
    assert panel.url.text() == "http://127.0.0.1:8080/v1"

    # The LAN switch cannot be on without a key: turning it on makes one; off drops it.
    panel.lan.setChecked(True)
    assert len(panel.key.text()) >= 24 and panel.url.text() == f"http://{lan_address()}:8080/v1"
    panel.lan.setChecked(False)
    assert panel.key.text() == ""

    port = free_port()
    panel.port.setValue(port)
    qtbot.mouseClick(panel.start, Qt.MouseButton.LeftButton)
    assert w.server.state == "starting" and not panel.start.isEnabled()
    waits.until(qtbot, lambda: w.server.state in ("ready", "crashed"), cpu_s=120)
    assert w.server.state == "ready", panel.status.text()
    assert f"Serving at http://127.0.0.1:{port}/v1" in panel.status.text()
    assert "main: server is listening" in panel.log.toPlainText() or "listening" in panel.log.toPlainText()
    server = w.server.server
    assert server is not None and server.pid is not None and is_alive(server.pid)
    assert w.sampler.pid == server.pid  # the meters watch the process that holds the model
    assert not w.ctx.engine.engine.loaded  # one copy of the model: in the server

    # Another program uses it...
    c = openai.OpenAI(base_url=panel.url.text(), api_key="none", max_retries=0, timeout=60)
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4)
    assert r.choices[0].message.content

    # ...and so does the app's chat, without loading the model in-process.
    assert "served by llama-server" in w.chat_view.empty_hint.text()
    view = w.chat_view
    qtbot.keyClicks(view.input, "What is the capital of France?")
    qtbot.keyClick(view.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 2, cpu_s=60)
    msgs = view.messages()
    assert msgs[1].text() and "tokens/s" in msgs[1].stats.text()
    assert w.plans.plan is not None and f"/ {format_count(w.plans.plan.settings.n_ctx)}" in msgs[1].stats.text()
    assert not w.ctx.engine.engine.loaded
    stored = w.ctx.conversations.messages(open_chat(w))
    assert [m.role for m in stored] == ["user", "assistant"]
    qtbot.waitUntil(lambda: "tokens generated" in panel.stats.text(), timeout=10000)
    screenshot(w, "17-server-ready")

    # Stop: the process ends, the chat and meters come back to the app.
    qtbot.mouseClick(panel.stop, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.server.state == "stopped", cpu_s=30)
    assert not is_alive(server.pid) and w.chats.served is None and w.sampler.pid == os.getpid()
    assert panel.start.isEnabled() and not panel.stop.isEnabled()


def serve_from_the_window(w: MainWindow, qtbot: QtBot) -> int:
    """The Server tab started on a free port and ready; llama-server's process id."""
    w.server_panel.port.setValue(free_port())
    w.server.start()
    waits.until(qtbot, lambda: w.server.state in ("ready", "crashed"), cpu_s=120)
    assert w.server.state == "ready", w.server_panel.status.text()
    pid = w.server.server.pid  # type: ignore[union-attr]  # the server is running
    assert pid is not None
    return pid


def test_a_crashed_server_says_so_and_the_chat_returns(open_window: OpenWindow, qtbot: QtBot) -> None:
    w: MainWindow = open_window()
    panel = w.server_panel
    pid = serve_from_the_window(w, qtbot)
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would
    qtbot.waitUntil(lambda: w.server.state == "crashed", timeout=10000)
    assert "llama-server was killed by SIGKILL (the system may have run out of memory)" in panel.status.text()
    assert w.chats.served is None and panel.start.isEnabled()
    qtbot.waitUntil(
        lambda: w.sampler.pid == os.getpid() and (s := w.sampler.latest()) is not None and s.host.process_rss_bytes > 0,
        timeout=10000,
    )
    w.right_tabs.setCurrentWidget(panel)
    screenshot(w, "17-server-crashed")


def test_a_port_in_use_suggests_a_free_one(open_window: OpenWindow, qtbot: QtBot) -> None:
    import socket

    w: MainWindow = open_window()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        w.server_panel.port.setValue(port)
        w.server.start()
        assert w.server.state == "stopped" and w.server.server is None
        assert f"Port {port} is in use by another program" in w.server_panel.status.text()
        assert w.server_panel.port.value() != port


def test_a_server_killed_mid_reply_says_so_and_keeps_the_question(open_window: OpenWindow, qtbot: QtBot) -> None:
    seed_prefs(max_tokens=300)
    w: MainWindow = open_window()
    panel, view = w.server_panel, w.chat_view
    pid = serve_from_the_window(w, qtbot)

    def ask(text: str) -> None:
        qtbot.keyClicks(view.input, text)
        qtbot.keyClick(view.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)

    ask("Say hi.")  # a first turn: the server's context is known, nothing else asks it later
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(view.messages()) == 2, cpu_s=60)
    ask("Write a long story about a mill by a river.")
    waits.until(qtbot, lambda: len(view.messages()) == 4 and len(view.messages()[3].text()) > 20, cpu_s=60)
    os.kill(pid, signal.SIGKILL)
    waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and w.server.state == "crashed", cpu_s=30)
    # The chat says the reply was cut, not that it ended; the question is kept; the tab says why.
    assert view.banner_visible() and "stopped midway" in view.banner_text.text(), view.banner_text.text()
    stored = w.ctx.conversations.messages(open_chat(w))
    assert [m.role for m in stored] == ["user", "assistant", "user"]
    assert "killed by SIGKILL" in panel.status.text() and panel.start.isEnabled()
    assert not is_alive(pid)


def test_the_network_key_is_required_and_on_no_command_line(open_window: OpenWindow, qtbot: QtBot) -> None:
    seed_prefs(max_tokens=8)
    w: MainWindow = open_window()
    panel = w.server_panel
    w.right_tabs.setCurrentWidget(panel)
    panel.lan.setChecked(True)
    key = panel.key.text()
    port = free_port("0.0.0.0")
    panel.port.setValue(port)
    qtbot.mouseClick(panel.start, Qt.MouseButton.LeftButton)
    waits.until(qtbot, lambda: w.server.state in ("ready", "crashed"), cpu_s=180)
    assert w.server.state == "ready", panel.status.text()
    server = w.server.server
    assert server is not None and server.pid is not None
    try:
        assert key.encode() not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        base = f"http://127.0.0.1:{port}/v1"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="guess", max_retries=0, timeout=60).models.list()
        assert openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=60).models.list().data
        assert key not in panel.log.toPlainText()
    finally:
        w.server.stop()
        waits.until(qtbot, lambda: w.server.state == "stopped", cpu_s=60)
    log = w.ctx.log_path
    assert not log.exists() or key not in log.read_text(encoding="utf-8", errors="replace")
