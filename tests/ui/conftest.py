"""pytest-qt drives the real main window, offscreen, on the embedded model.

Each test gets its own user dirs (VRAMPILOT_HOME), so chats and settings start empty and a
"restart" is a second window on the same dirs. Screenshots of the main states go to
test-artifacts/ui/.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from testkit.machines import cpu_machine
from tests.hub.conftest import hf_env, hub, models, tiny_repo, vision_repo  # noqa: F401 - the Hub tab's tests use the Hub's fixtures
from tests.speed_record import save_measured_record
from vrampilot.engine import SamplingParams
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.speed import HostProbe, MeasuredMachine

if TYPE_CHECKING:
    from vrampilot.ui.app_context import AppContext

if TYPE_CHECKING:
    from vrampilot.ui.main_window import MainWindow

# What the open_window fixture gives a test: open_window(wait_plan=..., initial_model=..., machine=...).
OpenWindow = Callable[..., "MainWindow"]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
# One thread each: see tests/engine/conftest.py (busy 2-core machines).
FAST_PINS = Pins(n_ctx=1024, n_threads=1, n_threads_batch=1)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_probe: HostProbe) -> Path:
    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "home"))
    # A machine the app measured at an earlier start, so windows do not all run the probe;
    # tests/ui/test_speed_probe.py removes it to see a first start.
    save_measured_record(tmp_path / "home", host_probe)
    return tmp_path / "home"


@pytest.fixture
def app_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppContext]:
    """A context as the app builds it, on this test's own data folder, planning for a fixed CPU
    machine (no detection, and no speed probe: that machine has no record), for a controller driven
    without the window (tests/ui/test_*_controller.py)."""
    from vrampilot.ui.app_context import build_context

    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "home"))
    ctx = build_context(machine=MeasuredMachine(cpu_machine()))
    yield ctx
    ctx.close()


def heard(signal: Any) -> list[Any]:
    """Every value a one-argument `signal` carries from now on, in order."""
    values: list[Any] = []
    signal.connect(values.append)
    return values


def open_chat(w: MainWindow) -> int:
    """The id of the chat the window shows, which a test asks for once a message was sent."""
    chat_id = w.chats.chat_id
    assert chat_id is not None, "no chat is open"
    return chat_id


def seed_prefs(max_tokens: int = 24) -> None:
    """What a returning user would have: small context and one thread for the embedded model."""
    from vrampilot.ui.prefs import Prefs

    prefs = Prefs()
    model = embedded_model_path()
    assert model is not None
    prefs.set_pins_for(model, FAST_PINS)
    prefs.set_sampling(SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=1))
    prefs.sync()


def screenshot(widget: QWidget, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    # Let posted layout requests settle (a new plan re-lays out the side panel) before grabbing.
    QTest.qWait(80)
    assert widget.grab().save(str(path)), f"could not save {path}"
    return path


def activate(qtbot: QtBot, w: QWidget) -> None:
    """Make `w` the active window, as clicking it would; window shortcuts need an active window."""
    if QApplication.activeWindow() is not w:
        with qtbot.waitActive(w):
            w.activateWindow()


def settle(rounds: int = 5) -> None:
    """Deliver what is queued for the event loop (layout requests, deferred repaints and the events
    they post in turn), so a geometry check or a screenshot sees the laid-out window: a fixed
    number of rounds of work, never a wait on the clock."""
    for _ in range(rounds):
        QApplication.sendPostedEvents()
        QApplication.processEvents()


@pytest.fixture
def open_window(qtbot: QtBot, home: Path) -> Iterator[OpenWindow]:
    """Windows as the app builds them: a context on this test's home, then the window around it."""
    from vrampilot.ui.app_context import build_context
    from vrampilot.ui.main_window import MainWindow
    from vrampilot.ui.services import build_services
    from vrampilot.ui.theme import apply_theme

    windows: list[MainWindow] = []
    apply_theme(cast(QApplication, QApplication.instance()))  # Qt types it as the QCoreApplication base

    def make(wait_plan: bool = True, initial_model: str | None = None, machine: object = None) -> MainWindow:
        ctx = build_context(machine=machine)  # type: ignore[arg-type]  # machine: a MeasuredMachine, or None for this one
        w = MainWindow(ctx, build_services(ctx), initial_model=initial_model)
        qtbot.addWidget(w)
        w.resize(1500, 950)
        with qtbot.waitActive(w):
            w.show()
            w.activateWindow()
        windows.append(w)
        if wait_plan:
            qtbot.waitUntil(lambda: w.plans.plan is not None, timeout=20000)
        return w

    yield make
    for w in windows:
        w.shutdown()
        w.ctx.close()
    # pytest-qt has closed the windows and asked Qt to delete them later: left to the next test's
    # event loop, that deletion ran beside the next window's workers, and a worker whose cycle
    # collector freed a wrapper of an object connected to them (~QObject holds Qt's connection lock,
    # then asks for the GIL) deadlocked with the GUI thread deleting them (holding the GIL, waiting
    # for that lock): the suite hung in qtbot.waitActive until its timeout. Deleted here instead,
    # and the cycles collected, while no worker of this test runs.
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()


# The most work the GUI thread may do between two turns of its event loop in the flow tests: a
# tenth of a second is where a user starts to see a freeze.
MAX_WORK_S = 0.100


class StallMeter(QObject):
    """Measures what the GUI thread itself does between two runs of a 5 ms timer: its own CPU time
    (CLOCK_THREAD_CPUTIME_ID), which is work done on the GUI thread that blocks its event loop.

    Wall-clock gaps are what a busy machine gives to others (other programs, the hypervisor, a
    preempted thread holding the GIL), not what the app did: on two cores beside two CPU-bound
    loops a passing flow's GUI thread went hundreds of ms between ticks doing a few ms of its own
    work. The wall-clock figure is kept for the report (`max_raw_stall_s`).
    """

    def __init__(self, interval_ms: int = 5) -> None:
        super().__init__()
        self.interval_s = interval_ms / 1000
        self.max_work_s = 0.0
        self.max_raw_stall_s = 0.0
        self.ticks = 0
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last = 0.0
        self._last_cpu = 0.0

    def start(self) -> None:
        self._last, self._last_cpu = time.perf_counter(), time.thread_time()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """For the test's own slow steps on the GUI thread (screenshots), which a user never runs."""
        self._timer.stop()
        try:
            yield
        finally:
            self.start()

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()  # the timer runs on the GUI thread
        self.max_raw_stall_s = max(self.max_raw_stall_s, now - self._last - self.interval_s)
        self.max_work_s = max(self.max_work_s, cpu - self._last_cpu)
        self._last, self._last_cpu = now, cpu
        self.ticks += 1

    def report(self) -> str:
        return (
            f"GUI thread worked {self.max_work_s * 1000:.0f} ms at most between two turns of its event loop "
            f"({self.max_raw_stall_s * 1000:.0f} ms wall clock, including time the machine gave to others)"
        )
