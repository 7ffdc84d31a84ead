"""The Qt adapter between the sampling thread and the meter widgets.

The sampler thread appends to its bounded history; a QTimer on the GUI thread, running at the
sampling interval, collects what arrived since its last tick into the MeterState and notifies the
widgets once. So the GUI repaints at most at the sampling rate, a burst after the GUI was busy
becomes one repaint, an idle app repaints nothing, and the meters keep sampling while the GUI or
the engine is busy.

No Python-side `Signal.emit()` on this path, on purpose: PySide6 6.12.0 drops a reference to `True`
on every emit made from Python (Python 3.11, where `True` is not immortal), and at the meters' rate
the interpreter aborts within minutes. Signals emitted by Qt itself (the timer, button clicks) are
unaffected, so the widgets register plain callbacks here instead of connecting to a signal.
"""

from __future__ import annotations

from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QTimer

from vrampilot.meters.sampler import Sampler
from vrampilot.meters.spill import SpillAssessment
from vrampilot.meters.state import MeterReadout, MeterState
from vrampilot.planner.plan import Plan

ReadoutListener = Callable[[MeterReadout], None]


class MetersFeed(QObject):
    """One per app: the panel and the status widget share it, so they show the same numbers."""

    def __init__(self, sampler: Sampler, parent: QObject | None = None, *, start: bool = True) -> None:
        super().__init__(parent)
        self.sampler = sampler
        self.state = MeterState(history_s=sampler.history_s, clock=sampler.clock)
        self._listeners: list[ReadoutListener] = []
        self._bookmark = 0
        self._dirty = False
        self._timer = QTimer(self)
        self._timer.setInterval(max(1, round(sampler.interval_s * 1000)))
        self._timer.timeout.connect(self.poll)
        self._timer.start()
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop)
        # Samples taken before this feed existed (a panel opened late) still draw their history.
        self._collect()
        if start:
            sampler.start()

    def add_listener(self, listener: ReadoutListener) -> None:
        """`listener(readout)` on the GUI thread after new samples, a plan or a reply."""
        self._listeners.append(listener)

    def remove_listener(self, listener: ReadoutListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)
        self._stop_if_orphaned()

    def _stop_if_orphaned(self) -> None:
        # A feed nobody owns is freed by Python's garbage collector, which may run on any thread;
        # deleting a QObject with a running timer off the GUI thread leaves the timer registered
        # there and the next tick crashes Qt. So an unowned feed stops its timer, on the GUI
        # thread, as soon as its last panel is gone.
        if not shiboken6.isValid(self):
            return  # deleted along with its owner window: no timer left to stop
        if not self._listeners and self.parent() is None:
            self._timer.stop()

    def _collect(self) -> None:
        samples, self._bookmark = self.sampler.samples_since(self._bookmark)
        for sample in samples:
            self.state.update(sample)
        self._dirty = self._dirty or bool(samples)

    def poll(self) -> MeterReadout | None:
        """Take in new samples and notify listeners if anything changed (the timer calls this;
        tests call it to step without waiting)."""
        self._collect()
        if not self._dirty:
            return None
        readout = self.state.latest()
        if readout is None:
            return None
        self._dirty = False
        for listener in list(self._listeners):
            # A panel deleted by Qt leaves its Python wrapper (and this listener) behind; calling
            # into it would touch freed C++ memory, so such listeners are dropped here.
            owner = getattr(listener, "__self__", None)
            if isinstance(owner, QObject) and not shiboken6.isValid(owner):
                self._listeners.remove(listener)
                continue
            listener(readout)
        self._stop_if_orphaned()
        return readout

    def set_plan(self, plan: Plan | None) -> None:
        self.state.set_plan(plan)
        self._refresh()

    def record_decode(
        self, decode_tps: float, *, context_tokens: int | None = None, duration_s: float | None = None
    ) -> SpillAssessment:
        """The engine's measured speed for the reply that just finished."""
        self._collect()  # judge the reply against every reading taken during it
        result = self.state.record_decode(decode_tps, context_tokens=context_tokens, duration_s=duration_s)
        self._refresh()
        return result

    def _refresh(self) -> None:
        # A new plan or reply shows without waiting for the next sample; the repaint itself still
        # waits for the timer.
        if self.state.refresh() is not None:
            self._dirty = True

    def stop(self) -> None:
        self._timer.stop()
        self.sampler.stop()
