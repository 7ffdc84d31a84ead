"""Work off the GUI thread.

- `run_task`: a function on the global QThreadPool (planning, reading GGUF headers, hardware
  detection); the result comes back by signal on the GUI thread.
- `EngineThread`: one QThread that owns every llama.cpp call (load, chat), so calls never overlap.
  Cancel is a threading.Event the engine checks (progress callback, between batches, per token);
  a thread is never killed. Other chat backends (the experimental hybrid cache) run their replies
  on the same thread with `run_chat`: they use the engine's tokenizer, and a reply of either kind
  streams, stops and finishes through the same signals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QRunnable, QThread, QThreadPool, Signal, Slot

from vrampilot.engine import Engine, EngineError, LoadResult, Message, Reply, SamplingParams
from vrampilot.planner.search import Plan

# A reply made by another backend on the engine thread: (engine, on_text, on_report, cancel) -> Reply.
# `on_report` carries whatever side information the backend has while it runs (the hybrid cache's
# bytes held), queued to the GUI thread by the `report` signal.
ChatJob = Callable[[Engine, Callable[[str], None], Callable[[object], None], threading.Event], Reply]


class _TaskSignals(QObject):
    done = Signal(object)
    failed = Signal(object)
    progress = Signal(float, str)


class _Task(QRunnable):
    def __init__(self, fn: Callable[..., Any], signals: _TaskSignals, with_progress: bool) -> None:
        super().__init__()
        self._fn = fn
        self._signals = signals
        self._with_progress = with_progress

    def run(self) -> None:
        try:
            result = self._fn(self._signals.progress.emit) if self._with_progress else self._fn()
        except Exception as exc:  # reported to the GUI, which shows it
            self._signals.failed.emit(exc)
        else:
            self._signals.done.emit(result)


_live: set[_TaskSignals] = set()


def run_task(
    fn: Callable[..., Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[BaseException], None] | None = None,
    *,
    parent: QObject | None = None,
    on_progress: Callable[[float, str], None] | None = None,
) -> None:
    """Run `fn` on the thread pool; `on_done(result)` or `on_error(exc)` run on the GUI thread.

    With `on_progress`, `fn` is called with a `progress(fraction, text)` function it may call from
    the pool thread; `on_progress` receives those calls on the GUI thread.

    `parent` is the widget the callbacks belong to: once it is gone they are skipped. The signal
    object itself has no parent on purpose: were it a child of the widget, closing the widget would
    delete it while the pool thread may still be emitting on it, which crashes Qt.
    """
    signals = _TaskSignals()
    _live.add(signals)

    def alive() -> bool:
        return parent is None or shiboken6.isValid(parent)

    def finish(_arg: object = None) -> None:
        _live.discard(signals)
        signals.deleteLater()

    def done(result: object) -> None:
        if alive():
            on_done(result)

    def failed(exc: BaseException) -> None:
        if alive() and on_error is not None:
            on_error(exc)

    def progress(fraction: float, text: str) -> None:
        if alive() and on_progress is not None:
            on_progress(fraction, text)

    signals.done.connect(done)
    signals.done.connect(finish)
    signals.failed.connect(failed)
    signals.failed.connect(finish)
    signals.progress.connect(progress)
    QThreadPool.globalInstance().start(_Task(fn, signals, with_progress=on_progress is not None))


class _EngineWorker(QObject):
    """Lives on the engine thread; its slots run there."""

    load_progress = Signal(float)
    loaded = Signal(object)  # LoadResult
    load_failed = Signal(object, bool)  # exception, cancelled
    text = Signal(str)
    replied = Signal(object)  # Reply
    chat_failed = Signal(object)  # exception (ContextOverflow, TemplateError, ...)
    unloaded = Signal()
    report = Signal(object)

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine

    @Slot(object, object)
    def load(self, plan: Plan, cancel: threading.Event) -> None:
        last = [-1.0, 0.0]

        def progress(value: float) -> None:
            # llama.cpp reports per tensor; the GUI needs a few updates a second, not thousands.
            now = time.monotonic()
            if value >= 1.0 or (value - last[0] >= 0.02 and now - last[1] > 0.05):
                last[0], last[1] = value, now
                self.load_progress.emit(value)

        try:
            result = self.engine.load(plan, progress=progress, cancel=cancel)
        except EngineError as exc:
            self.load_failed.emit(exc, cancel.is_set())
        except Exception as exc:
            self.load_failed.emit(exc, False)
        else:
            self.loaded.emit(result)

    @Slot(object, object, object, bool, bool)
    def chat(
        self, messages: Sequence[Message], sampling: SamplingParams, cancel: threading.Event, force: bool, trim: bool
    ) -> None:
        try:
            if trim:
                # "Drop oldest turns": counting tokens needs the tokenizer, so it happens here.
                messages = self.engine.fit_messages(messages, sampling.max_tokens)
            reply = self.engine.chat(messages, sampling, on_text=self.text.emit, cancel=cancel, allow_overflow=force)
        except Exception as exc:
            self.chat_failed.emit(exc)
        else:
            self.replied.emit(reply)

    @Slot(object, object)
    def run_chat(self, job: ChatJob, cancel: threading.Event) -> None:
        try:
            reply = job(self.engine, self.text.emit, self.report.emit, cancel)
        except Exception as exc:
            self.chat_failed.emit(exc)
        else:
            self.replied.emit(reply)

    @Slot()
    def unload(self) -> None:
        self.engine.unload()
        self.unloaded.emit()


class EngineThread(QObject):
    """The GUI's handle on the engine: requests go in by signal, results come back by signal."""

    load_progress = Signal(float)
    loaded = Signal(object)
    load_failed = Signal(object, bool)
    text = Signal(str)
    replied = Signal(object)
    chat_failed = Signal(object)
    unloaded = Signal()
    report = Signal(object)

    _do_load = Signal(object, object)
    _do_chat = Signal(object, object, object, bool, bool)
    _do_run_chat = Signal(object, object)
    _do_unload = Signal()

    def __init__(self, engine: Engine | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine or Engine()
        self._thread = QThread()
        self._thread.setObjectName("engine")
        self._worker = _EngineWorker(self.engine)
        self._worker.moveToThread(self._thread)
        self._do_load.connect(self._worker.load)
        self._do_chat.connect(self._worker.chat)
        self._do_run_chat.connect(self._worker.run_chat)
        self._do_unload.connect(self._worker.unload)
        for name in ("load_progress", "loaded", "load_failed", "text", "replied", "chat_failed", "unloaded", "report"):
            getattr(self._worker, name).connect(getattr(self, name))
        self._cancel_load: threading.Event | None = None
        self._cancel_chat: threading.Event | None = None
        self.busy = False
        self.loaded.connect(self._idle)
        self.load_failed.connect(self._idle)
        self.replied.connect(self._idle)
        self.chat_failed.connect(self._idle)
        self.unloaded.connect(self._idle)
        self._thread.start()

    def _idle(self, *_args: object) -> None:
        self.busy = False

    def load(self, plan: Plan) -> None:
        self._cancel_load = threading.Event()
        self.busy = True
        self._do_load.emit(plan, self._cancel_load)

    def cancel_load(self) -> None:
        if self._cancel_load is not None:
            self._cancel_load.set()

    def chat(
        self, messages: Sequence[Message], sampling: SamplingParams, *, force: bool = False, trim: bool = False
    ) -> None:
        """`force`: generate until the context is full; `trim`: drop the oldest turns to fit first."""
        self._cancel_chat = threading.Event()
        self.busy = True
        self._do_chat.emit(list(messages), sampling, self._cancel_chat, force, trim)

    def run_chat(self, job: ChatJob) -> None:
        """Run another backend's reply on the engine thread; `stop()` sets the event it is given."""
        self._cancel_chat = threading.Event()
        self.busy = True
        self._do_run_chat.emit(job, self._cancel_chat)

    def stop(self) -> None:
        if self._cancel_chat is not None:
            self._cancel_chat.set()

    def unload(self) -> None:
        self.busy = True
        self._do_unload.emit()

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Cancel what runs, let the thread finish it, free the model."""
        self.cancel_load()
        self.stop()
        self._thread.quit()
        self._thread.wait(timeout_ms)
        self.engine.unload()


__all__ = ["EngineThread", "LoadResult", "Reply", "run_task"]
