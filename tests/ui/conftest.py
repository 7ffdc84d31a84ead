"""pytest-qt drives the real main window, offscreen, on the embedded model.

Each test gets its own user dirs (VRAMPILOT_HOME), so chats and settings start empty and a
"restart" is a second window on the same dirs. Screenshots of the main states go to
test-artifacts/ui/.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from vrampilot.engine import SamplingParams
from vrampilot.hardware.measured import HostProbe
from vrampilot.paths import embedded_model_path
from vrampilot.planner.search import Pins

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
# One thread each: see tests/engine/conftest.py (busy 2-core machines).
FAST_PINS = Pins(n_ctx=1024, n_threads=1, n_threads_batch=1)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_probe: HostProbe) -> Path:
    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "home"))
    # A machine the app measured at an earlier start (the session's one real probe), so windows do
    # not all run the probe; tests/ui/test_speed_probe.py removes it to see a first start.
    from vrampilot.hardware import detect_machine
    from vrampilot.hardware.speed_store import save_probe

    speed = detect_machine().speed
    assert speed is not None
    # Saved as taken on a quiet machine: on a busy one (a shared CI host) the app would measure
    # again at every window's start, and that probe would compete with the test for the CPU.
    save_probe(speed.fingerprint, replace(host_probe, others_cpu_share=0.0, app_busy=False))
    return tmp_path / "home"


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


@pytest.fixture
def open_window(qtbot: QtBot, home: Path) -> Iterator[Callable[..., object]]:
    """Windows as the app builds them: a context on this test's home, then the window around it."""
    from vrampilot.ui.context import build_context
    from vrampilot.ui.main_window import MainWindow
    from vrampilot.ui.theme import apply_theme

    windows: list[MainWindow] = []
    apply_theme(QApplication.instance())  # type: ignore[arg-type]

    def make(wait_plan: bool = True, initial_model: str | None = None, machine: object = None) -> MainWindow:
        ctx = build_context(machine=machine)  # type: ignore[arg-type]
        w = MainWindow(ctx, initial_model=initial_model)
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


def _run_delays_s() -> tuple[float, dict[int, float]]:
    """Time this thread, and each other Python thread, has spent runnable but waiting for a CPU
    (Linux schedstat), else zeros. Only Python threads can hold the GIL the GUI thread waits for;
    llama.cpp's own compute threads are left out."""

    def read(path: str) -> float:
        try:
            with open(path) as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    me = threading.get_native_id()
    others = {t.native_id for t in threading.enumerate() if t.native_id is not None and t.native_id != me}
    return read("/proc/thread-self/schedstat"), {tid: read(f"/proc/self/task/{tid}/schedstat") for tid in others}


_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _steal_s() -> tuple[float, ...]:
    """The time the hypervisor has taken from each of this VM's CPUs ("steal", Linux /proc/stat),
    else nothing. While a vCPU is stolen nothing on it runs and the guest's own run-queue
    delays do not count it: a VM whose neighbours are busy froze the GUI thread of a passing flow
    test for 369 ms with no wait for a CPU recorded."""
    try:
        with open("/proc/stat") as f:
            steal = [int(line.split()[8]) for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except (OSError, ValueError, IndexError):
        return ()
    return tuple(x / _CLOCK_TICKS for x in steal)


# The longest the GUI thread may go without running its event loop in the flow tests. A tenth of
# a second is where a user starts to see a freeze; tighter limits measured the host: on two vCPUs
# that share a core, the GUI thread's own 30 ms of work takes twice as long while other sessions
# keep the sibling busy.
MAX_STALL_S = 0.100


class StallMeter(QObject):
    """Measures how long the GUI thread's event loop goes without running a 5 ms timer.

    Other sessions may load this machine's few cores; time the GUI thread spent waiting for a CPU
    is the machine's doing, not the app's, and is subtracted, as is time the hypervisor stole from
    a CPU of this VM meanwhile (the most from any one). So is the longest wait for a CPU of
    any other Python thread in the same interval: one preempted while it holds the GIL (the
    engine's, the meters') makes the GUI thread wait for the GIL as long, and on an overloaded
    machine that is the machine's doing too. `max_raw_stall_s` keeps the wall-clock figure.
    """

    def __init__(self, interval_ms: int = 5) -> None:
        super().__init__()
        self.interval_s = interval_ms / 1000
        self.max_stall_s = 0.0
        self.max_raw_stall_s = 0.0
        self.ticks = 0
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last = 0.0
        self._last_delay = 0.0
        self._last_steal: tuple[float, ...] = ()

    def start(self) -> None:
        self._last = time.perf_counter()
        self._last_delay, self._last_others = _run_delays_s()
        self._last_steal = _steal_s()
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
        now = time.perf_counter()
        delay, others = _run_delays_s()
        steal = _steal_s()
        raw = now - self._last - self.interval_s
        waited_elsewhere = max((v - self._last_others.get(tid, v) for tid, v in others.items()), default=0.0)
        self.max_raw_stall_s = max(self.max_raw_stall_s, raw)
        stolen = max((a - b for a, b in zip(steal, self._last_steal, strict=False)), default=0.0)
        self.max_stall_s = max(self.max_stall_s, raw - (delay - self._last_delay) - waited_elsewhere - stolen)
        self._last = now
        self._last_delay, self._last_others, self._last_steal = delay, others, steal
        self.ticks += 1

    def report(self) -> str:
        return (
            f"GUI thread blocked for {self.max_stall_s * 1000:.0f} ms "
            f"({self.max_raw_stall_s * 1000:.0f} ms wall clock, including waits for a CPU)"
        )
