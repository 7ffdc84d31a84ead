"""All background work of the window, in one place.

- `Tasks`: functions on a thread pool (planning, GGUF headers, hardware detection, hub searches),
  and long ones (downloads) on a pool of their own so they never hold a short task's thread.
  Each call returns a `TaskHandle` with `cancel()`; a task with a `key` supersedes the one
  running under that key (latest request wins: a newer plan, search or fit makes the older
  result irrelevant, and its callbacks are dropped). Results, progress and errors come back on
  the GUI thread. A non-user error is logged with its traceback at the thread boundary.
- `EngineThread`: one QThread that owns every llama.cpp call (load, chat, saving and restoring
  KV state, any `run` job), so calls never overlap. Cancel is a threading.Event the engine checks
  (progress callback, between batches, per token); a thread is never killed.

Signals are emitted from worker threads on QObjects that have no parent: were they children of a
widget, closing the widget would delete them while a worker may still emit on them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QRunnable, QThread, QThreadPool, Signal, Slot

from vrampilot.engine import Engine, EngineError, LoadResult, Message, ModelFileChanged, Reply, SamplingParams
from vrampilot.errors import UserError
from vrampilot.planner.plan import Plan

_log = logging.getLogger("vrampilot.ui.workers")

# A reply made by a chat backend on the engine thread: (engine, on_text, on_report, cancel) -> Reply.
# `on_report` carries side information while it runs (the hybrid cache's bytes), queued to the GUI.
ChatJob = Callable[[Engine, Callable[[str], None], Callable[[object], None], threading.Event], Reply]
EngineJob = Callable[[Engine], Any]


class TaskHandle:
    """One submitted task: what the work function receives, and what the caller keeps."""

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.cancelled = threading.Event()
        self.finished = threading.Event()
        self._progress: Callable[[object], None] = lambda _p: None

    def cancel(self) -> None:
        self.cancelled.set()

    def progress(self, payload: object) -> None:
        """Called from the work function (any thread); reaches `on_progress` on the GUI thread."""
        self._progress(payload)


class _TaskSignals(QObject):
    done = Signal(object)
    failed = Signal(object)
    progress = Signal(object)


class _Task(QRunnable):
    def __init__(self, fn: Callable[[TaskHandle], Any], handle: TaskHandle, signals: _TaskSignals) -> None:
        super().__init__()
        self._fn, self._handle, self._signals = fn, handle, signals

    def run(self) -> None:
        try:
            result = self._fn(self._handle)
        except Exception as exc:
            # A task stopped on request (the window closing, a newer task) is not a fault.
            if not isinstance(exc, UserError) and not self._handle.cancelled.is_set():
                _log.error("background task failed", exc_info=True)
            self._tell("failed", exc)
        else:
            self._tell("done", result)
        finally:
            self._handle.finished.set()

    def _tell(self, what: str, value: object) -> None:
        # A task that outlived the app's shutdown wait (a cancelled probe ends at its next step,
        # seconds later) finds its signals deleted with the application: nobody is left to tell.
        try:
            if shiboken6.isValid(self._signals):
                getattr(self._signals, what).emit(value)
        except RuntimeError:
            _log.debug("background task ended after the app closed: its %s is dropped", what)


class Tasks(QObject):
    """Background work that reports back on the GUI thread (see the module docstring)."""

    # A failure no caller handled, for the window's one error line (already a user-facing text).
    unhandled_error = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._latest: dict[str, TaskHandle] = {}
        self._live: set[_TaskSignals] = set()
        self._long = QThreadPool()
        self._long.setMaxThreadCount(4)

    def submit(
        self,
        fn: Callable[[TaskHandle], Any],
        *,
        done: Callable[[Any], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
        progress: Callable[[object], None] | None = None,
        key: str | None = None,
        owner: QObject | None = None,
        long: bool = False,
    ) -> TaskHandle:
        """Run `fn(handle)` in the background; callbacks run on the GUI thread.

        `owner`: once that object is deleted the callbacks are skipped. `key`: a newer task with
        the same key cancels this one and its callbacks are skipped. Without `failed`, an error
        goes to `unhandled_error`.
        """
        handle = TaskHandle(key)
        if key is not None:
            previous = self._latest.get(key)
            if previous is not None:
                previous.cancel()
            self._latest[key] = handle
        signals = _TaskSignals()
        self._live.add(signals)

        def current() -> bool:
            if owner is not None and not shiboken6.isValid(owner):
                return False
            return key is None or self._latest.get(key) is handle

        def finish() -> bool:
            """Retire the task; True when its callbacks should run. The key is released first, so
            a callback that asks `is_running(key)` or submits again sees the task as done."""
            was_current = current()
            self._live.discard(signals)
            signals.deleteLater()
            if key is not None and self._latest.get(key) is handle:
                del self._latest[key]
            return was_current

        def on_done(result: object) -> None:
            if finish() and done is not None:
                done(result)

        def on_failed(exc: BaseException) -> None:
            if finish():
                if failed is not None:
                    failed(exc)
                else:
                    self.unhandled_error.emit(exc)

        def on_progress(payload: object) -> None:
            if progress is not None and current() and not handle.cancelled.is_set():
                progress(payload)

        signals.done.connect(on_done)
        signals.failed.connect(on_failed)
        signals.progress.connect(on_progress)
        handle._progress = signals.progress.emit
        pool = self._long if long else QThreadPool.globalInstance()
        pool.start(_Task(fn, handle, signals))
        return handle

    def is_running(self, key: str) -> bool:
        return key in self._latest

    def cancel(self, key: str) -> None:
        handle = self._latest.pop(key, None)
        if handle is not None:
            handle.cancel()

    def shutdown(self, timeout_ms: int = 120_000) -> None:
        """Cancel what runs and wait for the workers: their signal objects must outlive them. A
        cancelled task stops at its next check (the speed probe between two ubatches or passes),
        which on a busy machine can be seconds away: a worker left running after the window is
        gone emits into freed objects and crashes the process (seen with a 5 s wait beside two
        CPU-bound loops). `timeout_ms` only guards against a task that never checks."""
        for handle in list(self._latest.values()):
            handle.cancel()
        for pool in (self._long, QThreadPool.globalInstance()):
            if not pool.waitForDone(timeout_ms):
                _log.error("background work still running %d s after it was cancelled", timeout_ms // 1000)


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
    job_done = Signal(int, object, object)  # job id, result, exception

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
            _log.error("model load failed", exc_info=True)
            self.load_failed.emit(exc, False)
        else:
            self.loaded.emit(result)

    @Slot(object, object)
    def run_chat(self, job: ChatJob, cancel: threading.Event) -> None:
        try:
            reply = job(self.engine, self.text.emit, self.report.emit, cancel)
        except Exception as exc:
            if not isinstance(exc, UserError):
                _log.error("reply failed", exc_info=True)
            if isinstance(exc, ModelFileChanged):
                self.unloaded.emit()  # the engine let the model go: the window must know before it retries
            self.chat_failed.emit(exc)
        else:
            self.replied.emit(reply)

    @Slot(int, object)
    def run_job(self, job_id: int, job: EngineJob) -> None:
        try:
            result = job(self.engine)
        except Exception as exc:
            if not isinstance(exc, UserError):
                _log.error("engine job failed", exc_info=True)
            self.job_done.emit(job_id, None, exc)
        else:
            self.job_done.emit(job_id, result, None)

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
    _do_run_chat = Signal(object, object)
    _do_job = Signal(int, object)
    _do_unload = Signal()

    def __init__(self, engine: Engine | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine or Engine()
        self._thread = QThread()
        self._thread.setObjectName("engine")
        self._worker = _EngineWorker(self.engine)
        self._worker.moveToThread(self._thread)
        self._do_load.connect(self._worker.load)
        self._do_run_chat.connect(self._worker.run_chat)
        self._do_job.connect(self._worker.run_job)
        self._do_unload.connect(self._worker.unload)
        for name in ("load_progress", "loaded", "load_failed", "text", "replied", "chat_failed", "unloaded", "report"):
            getattr(self._worker, name).connect(getattr(self, name))
        self._worker.job_done.connect(self._job_done)
        self._jobs: dict[int, tuple[Callable[[Any], None] | None, Callable[[BaseException], None] | None]] = {}
        self._next_job = 0
        self._cancel_load: threading.Event | None = None
        self._cancel_chat: threading.Event | None = None
        self._started = False

    def start(self) -> None:
        """Start the thread; the composition root calls this once every database is open."""
        if not self._started:
            self._started = True
            self._thread.start()

    def load(self, plan: Plan) -> None:
        self.start()
        self._cancel_load = threading.Event()
        self._do_load.emit(plan, self._cancel_load)

    def cancel_load(self) -> None:
        if self._cancel_load is not None:
            self._cancel_load.set()

    def chat(self, messages: Sequence[Message], sampling: SamplingParams, *, trim: bool = False) -> None:
        """A llama.cpp reply; `trim`: drop the oldest turns to fit first."""
        messages = list(messages)

        def job(
            engine: Engine, on_text: Callable[[str], None], _report: Callable[[object], None], cancel: threading.Event
        ) -> Reply:
            if trim:  # counting tokens needs the tokenizer, so it happens here
                return engine.chat(
                    engine.fit_messages(messages, sampling.max_tokens), sampling, on_text=on_text, cancel=cancel
                )
            return engine.chat(messages, sampling, on_text=on_text, cancel=cancel)

        self.run_chat(job)

    def run_chat(self, job: ChatJob) -> None:
        """Run a backend's reply on the engine thread; `stop()` sets the event it is given."""
        self.start()
        self._cancel_chat = threading.Event()
        self._do_run_chat.emit(job, self._cancel_chat)

    def run(
        self,
        job: EngineJob,
        done: Callable[[Any], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Run `job(engine)` on the engine thread, after whatever is queued; callbacks on the GUI thread."""
        self.start()
        self._next_job += 1
        self._jobs[self._next_job] = (done, failed)
        self._do_job.emit(self._next_job, job)

    def _job_done(self, job_id: int, result: object, exc: object) -> None:
        done, failed = self._jobs.pop(job_id, (None, None))
        if isinstance(exc, BaseException):
            if failed is not None:
                failed(exc)
        elif done is not None:
            done(result)

    def stop(self) -> None:
        if self._cancel_chat is not None:
            self._cancel_chat.set()

    def unload(self) -> None:
        self.start()
        self._do_unload.emit()

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Cancel what runs, let the thread finish it, free the model."""
        self.cancel_load()
        self.stop()
        if self._started:
            self._thread.quit()
            self._thread.wait(timeout_ms)
        self.engine.unload()


__all__ = ["EngineThread", "LoadResult", "Reply", "TaskHandle", "Tasks"]
