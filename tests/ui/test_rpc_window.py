"""RPC hosts from the Plan panel on the real window: two ggml-rpc-server processes on loopback,
typed in with budgets; the plan shows a bar per device; a message loads the plan in llama-server
(never in the app's process) and the reply comes back across the hosts."""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from tests import waits
from tests.server.test_rpc import start_rpc_host
from tests.ui.conftest import OpenWindow, screenshot, seed_prefs
from vrampilot.server import free_port
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow

pytestmark = pytest.mark.slow


def test_plan_with_rpc_hosts_and_chat_through_them(open_window: OpenWindow, qtbot: QtBot) -> None:
    hosts = [start_rpc_host(free_port()) for _ in range(2)]
    endpoints = [f"127.0.0.1:{h.argv[h.argv.index('-p') + 1]}" for h in hosts]
    try:
        seed_prefs(max_tokens=12)
        w: MainWindow = open_window()
        view = w.plan_view
        view.rpc_hosts.setText(f"{endpoints[0]}=60MiB, {endpoints[1]}=200MiB")
        view.rpc_hosts.editingFinished.emit()
        waits.until(qtbot, lambda: w.plans.plan is not None and bool(w.plans.plan.settings.rpc_servers), cpu_s=30)
        p = w.plans.plan
        assert p is not None and p.fits
        assert [g.llama_name for g in p.target.gpus] == ["RPC0", "RPC1"]
        assert view.gpu_bar.isVisible() and view.device_bars[0].isVisible()
        assert view.gpu_bar.data() is not None and view.gpu_bar.data().title == "RPC0"  # type: ignore[union-attr]  # the bar was given its data
        assert "RPC host " + endpoints[0] in view.reasons.text()
        assert w.ctx.prefs.rpc_hosts().startswith(endpoints[0])

        # A busy chat keeps a message in the input rather than sending it: the window may still be
        # loading the model it opened with.
        waits.until(qtbot, lambda: not w.chats.busy, cpu_s=120)
        qtbot.keyClicks(w.chat_view.input, "What is the capital of France?")
        qtbot.keyClick(w.chat_view.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        assert not w.chat_view.input.toPlainText(), "the message was not sent"
        waits.until(qtbot, lambda: w.server.state in ("ready", "crashed"), cpu_s=60)
        assert w.server.state == "ready", w.server_panel.status.text()
        assert "--rpc" in (w.server.server.argv if w.server.server else [])
        waits.until(qtbot, lambda: w.chats.state is ChatState.IDLE and len(w.chat_view.messages()) == 2, cpu_s=60)
        assert w.chat_view.messages()[1].text()
        assert not w.ctx.engine.engine.loaded  # the model is in llama-server and on the hosts, not here
        w.right_tabs.setCurrentIndex(0)
        screenshot(w, "18-rpc-hosts")

        # A host goes away: the server stops with llama.cpp's reason, the window goes on.
        hosts[1].proc.kill()  # type: ignore[union-attr]  # a started host has its process
        qtbot.keyClicks(w.chat_view.input, "And of Italy?")
        qtbot.keyClick(w.chat_view.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        waits.until(qtbot, lambda: w.server.state == "crashed" and w.chats.state is ChatState.IDLE, cpu_s=60)
        assert "llama-server" in w.server_panel.status.text()
        assert os.getpid() and w.isVisible()
    finally:
        for h in hosts:
            h.stop()
