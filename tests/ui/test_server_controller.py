"""The server controller on its own, without the window: its panel, the plan controller it serves
from, the sampler the composition root builds (ui/services.py), a context on this test's own data
folder planning for a fixed CPU machine, and a real llama-server on 127.0.0.1 with the embedded
model."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Iterator

import psutil
import pytest
from pytestqt.qtbot import QtBot

from tests.ui.conftest import FAST_PINS, heard
from vrampilot.paths import embedded_model_path
from vrampilot.server.backend import ServerBackend
from vrampilot.server.process import is_alive
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.library.controller import LibraryController
from vrampilot.ui.library.view import LibraryView
from vrampilot.ui.plan.controller import PlanController
from vrampilot.ui.plan.hardware_view import HardwareView
from vrampilot.ui.plan.view import PlanView
from vrampilot.ui.server.controller import ServerController
from vrampilot.ui.server.view import ServerPanel
from vrampilot.ui.services import Services, build_services


@pytest.fixture
def services(app_context: AppContext) -> Iterator[Services]:
    s = build_services(app_context)
    yield s
    s.meters.stop()
    s.sampler.close()


@pytest.fixture
def server(qtbot: QtBot, app_context: AppContext, services: Services) -> Iterator[ServerController]:
    ctx = app_context
    ctx.prefs.set_pins_for(embedded_model_path(), FAST_PINS)  # type: ignore[arg-type]  # the embedded model is installed with the app
    views = ServerPanel(), PlanView(), LibraryView(), HardwareView()
    for v in views:
        qtbot.addWidget(v)
    panel, plan_view, library_view, hardware_view = views
    library = LibraryController(ctx, library_view)
    plans = PlanController(ctx, services.speed, plan_view, library, hardware_view, confirm=lambda _t, _x: True)
    controller = ServerController(ctx, panel, plans, services.sampler, confirm=lambda _t, _x: True)
    yield controller
    controller.shutdown()
    plans.shutdown()


def test_nothing_to_serve_before_a_plan_and_a_busy_port_is_named(qtbot: QtBot, server: ServerController) -> None:
    status = heard(server.status)
    server.start()
    assert server.state == "stopped" and status == ["Cannot serve yet: Planning…"]

    with qtbot.waitSignal(server.plans.plan_shown, timeout=20000):
        server.plans.start(None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server.panel.port.setValue(port)
        server.start()
    assert server.state == "stopped" and server.server is None
    free = server.panel.port.value()
    assert free != port and status[-1] == f"Port {port} is in use by another program; port {free} is free"
    assert port < free <= port + 100  # the next free one (8081 for 8080), not a random high port


def test_serves_the_plan_then_hands_the_chat_and_meters_back(qtbot: QtBot, server: ServerController) -> None:
    with qtbot.waitSignal(server.plans.plan_shown, timeout=20000):
        server.plans.start(None)
    backends = heard(server.backend_changed)
    server.start()
    assert server.state == "starting"
    qtbot.waitUntil(lambda: server.state in ("ready", "crashed"), timeout=120000)
    assert server.state == "ready", server.panel.log.toPlainText()[-2000:]
    assert server.server is not None and server.config is not None
    assert isinstance(backends[-1], ServerBackend) and server.sampler.pid == server.server.pid
    pid = server.server.pid
    # llama-server's prompt cache and checkpoints as the plan sized them (issue 57), on the
    # command line of the process that runs.
    assert server.plans.plan is not None
    planned = server.plans.plan.settings
    assert planned.cache_ram_mib > 0
    cmdline = psutil.Process(pid).cmdline()
    assert cmdline[cmdline.index("--cache-ram") + 1] == str(planned.cache_ram_mib)
    assert cmdline[cmdline.index("--ctx-checkpoints") + 1] == str(planned.ctx_checkpoints)
    server.start()  # the same plan again: it is already served
    assert server.state == "ready" and server.server is not None and server.server.pid == pid

    server.stop()
    assert server.state == "stopping"
    qtbot.waitUntil(lambda: server.state == "stopped", timeout=60000)
    assert backends[-1] is None and server.sampler.pid == os.getpid() and server.server is None


def test_a_server_that_stops_answering_is_said_and_stop_still_stops_it(
    qtbot: QtBot, server: ServerController, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Said after 1 s of silence, not the app's 5: the same watch (tests/server/test_serve_faults.py
    # waits the real 5 s through `vrampilot serve`), about 8 s less of this test waiting idle.
    monkeypatch.setattr(ServerController, "hang_after_s", 1.0)
    with qtbot.waitSignal(server.plans.plan_shown, timeout=20000):
        server.plans.start(None)
    server.start()
    qtbot.waitUntil(lambda: server.state in ("ready", "crashed"), timeout=120000)
    assert server.state == "ready" and server.server is not None and server.server.pid is not None
    pid = server.server.pid
    status = server.panel.status
    try:
        os.kill(pid, signal.SIGSTOP)  # alive and silent: a debugger, a driver that hangs
        qtbot.waitUntil(lambda: "llama-server does not answer" in status.text(), timeout=60000)
        assert f"its process {pid} is stopped" in status.text() and server.panel.stop.isEnabled()
        os.kill(pid, signal.SIGCONT)
        qtbot.waitUntil(lambda: "Serving at" in status.text(), timeout=60000)
        os.kill(pid, signal.SIGSTOP)
        qtbot.waitUntil(lambda: "llama-server does not answer" in status.text(), timeout=60000)
        server.stop()  # continued to take the signal: it shuts down as asked, not killed at the end
        qtbot.waitUntil(lambda: server.state == "stopped", timeout=60000)
        assert "llama-server exited with status 0" in status.text(), status.text()
        assert not is_alive(pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_a_blank_key_is_no_key_and_the_network_gets_a_made_one(qtbot: QtBot, server: ServerController) -> None:
    # HTTP drops a header's blanks at its ends: a server wanting "   " could be used by nobody.
    with qtbot.waitSignal(server.plans.plan_shown, timeout=20000):
        server.plans.start(None)
    server.panel.lan.setChecked(True)
    server.panel.key.setText("   ")
    server.start()
    try:
        assert server.config is not None and server.config.api_key is not None
        assert server.config.api_key.strip() == server.config.api_key == server.panel.key.text()
        assert len(server.config.api_key) >= 24
    finally:
        server.stop()
        qtbot.waitUntil(lambda: server.state in ("stopped", "crashed"), timeout=60000)
