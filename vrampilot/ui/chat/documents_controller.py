"""Documents in the window: reading files on a worker, the fit against the shown plan, the prompt
for each question, the prompt-processing progress, and saving/restoring the KV cache.

The work is the Qt-free `vrampilot.documents`; this object only moves it off the GUI thread (reading
and counting on the task pool, saving and restoring the KV cache on the engine thread, which owns
every llama.cpp call) and keeps the panel in step. The chat controller asks it for the messages of
each turn and tells it about chats, plans, loads and replies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from vrampilot.documents import (
    Attachment,
    Composed,
    ContextGiven,
    Document,
    DocumentSet,
    FitReport,
    extract,
    needed_context,
    sources_line,
    state_key,
    tokenizer_for,
)
from vrampilot.engine import Engine, Message, PromptProgress
from vrampilot.log import describe_error
from vrampilot.planner.plan import Plan
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.chat.documents_panel import DocumentsPanel
from vrampilot.ui.workers import TaskHandle

# Prompts shorter than this are read in a blink: no progress bar.
PROGRESS_MIN_TOKENS = 256


class DocumentsController(QObject):
    replan_requested = Signal(int)  # the context to pin
    status = Signal(str)
    changed = Signal()  # attachments or fit changed
    _prompt_progress = Signal(object)

    def __init__(self, ctx: AppContext, panel: DocumentsPanel | None = None, *, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        engine = ctx.engine
        self.engine_thread = engine
        self.engine: Engine = engine.engine
        self.panel = panel or DocumentsPanel()
        self.store = ctx.documents
        self.kv = ctx.kv_states
        self.chat_id: int | None = None
        self.plan: Plan | None = None
        self.docs: DocumentSet | None = None
        self._model: Path | None = None
        self.fit: FitReport | None = None
        self.reply_tokens = 512  # the main window keeps this at the sampling panel's max tokens
        self.turns: dict[int, ContextGiven] = {}
        self.last_given: ContextGiven | None = None
        self._queue: list[Path] = []
        self._cancel: threading.Event | None = None
        self._busy = False

        self.panel.remove_requested.connect(self.remove)
        self.panel.cancel_extraction_requested.connect(self.cancel_extraction)
        self.panel.cancel_prompt_requested.connect(self.engine_thread.stop)
        self.panel.replan_requested.connect(self._replan_clicked)
        # The engine reports from its own thread; the signal queues it onto the GUI thread.
        self._prompt_progress.connect(self._show_prompt_progress)
        self.engine.prompt_progress = self._prompt_progress.emit
        engine.text.connect(lambda _t: self.panel.hide_prompt_progress())
        engine.replied.connect(lambda _r: self.panel.hide_prompt_progress())
        engine.chat_failed.connect(lambda _e: self.panel.hide_prompt_progress())

    # -- state ---------------------------------------------------------------------------------
    @property
    def attachments(self) -> list[Attachment]:
        return self.docs.attachments if self.docs else []

    @property
    def active(self) -> bool:
        return bool(self.docs)

    @property
    def busy(self) -> bool:
        return self._busy

    def _start(
        self,
        fn: Callable[[Callable[[float, str], None]], Any],
        done: Callable[[Any], None],
        failed: Callable[[BaseException], None],
        progress: Callable[[float, str], None] | None = None,
        key: str | None = None,
    ) -> None:
        def work(task: TaskHandle) -> Any:
            return fn(lambda fraction, text: task.progress((fraction, text)))

        def report(payload: object) -> None:
            if progress is not None and isinstance(payload, tuple):
                progress(float(payload[0]), str(payload[1]))

        self.ctx.tasks.submit(work, done=done, failed=failed, progress=report, key=key, owner=self)

    # -- plan ----------------------------------------------------------------------------------
    def set_plan(self, plan: Plan | None) -> None:
        """The plan shown changed: a new model means a new tokenizer (documents are counted again)."""
        self.plan = plan
        if plan is None:
            return
        if plan.spec.path != self._model:
            self._model = plan.spec.path
            # A saved chat opened before any plan existed has its documents only in the store.
            docs = self.store.documents(self.chat_id) if self.chat_id is not None else []
            docs = docs or [a.document for a in self.attachments]
            self.docs = None
            if docs:
                self._recount(docs)
                return
        self.refit()

    def _new_set(self) -> DocumentSet:
        assert self._model is not None
        return DocumentSet(tokenizer_for(self._model).count)

    def _recount(self, docs: Sequence[Document]) -> None:
        model = self._model

        def work(_progress: Callable[[float, str], None]) -> tuple[Path | None, DocumentSet]:
            ds = self._new_set()
            for d in docs:
                ds.add_prepared(ds.prepare(d))
            return model, ds

        def done(result: tuple[Path | None, DocumentSet]) -> None:
            if result[0] == self._model:
                self.docs = result[1]
                self._refresh()
                self.restore_state()

        self._start(work, done, self._failed, key="documents-count")

    def refit(self) -> None:
        """Size the documents against the shown plan (on a worker: the planner may run a few times)."""
        if self.plan is None or not self.docs:
            self.fit = None
            self.panel.set_fit(None)
            self.changed.emit()
            return
        plan, docs = self.plan, self.docs
        reply = self.reply_tokens

        def done(report: FitReport) -> None:
            self.fit = report
            self.panel.set_fit(report)
            self.changed.emit()

        self.ctx.tasks.submit(
            lambda _t: docs.fit(plan, reply_tokens=reply),
            done=done,
            failed=self._failed,
            key="documents-fit",
            owner=self,
        )

    def _replan_clicked(self) -> None:
        if self.fit is not None and self.fit.suggested_ctx:
            self.replan_requested.emit(self.fit.suggested_ctx)

    # -- attaching -----------------------------------------------------------------------------
    def attach_files(self, paths: Sequence[Path]) -> None:
        """Read files one after another on a worker; each shows its progress, then its chip."""
        if self._model is None:
            self.panel.show_error("Select a model first: documents are counted in its tokenizer.")
            return
        self._queue += [Path(p) for p in paths]
        self._next()

    def _next(self) -> None:
        if self._busy or not self._queue:
            return
        path = self._queue.pop(0)
        self._busy = True
        cancel = threading.Event()
        self._cancel = cancel
        self.panel.hide_error()
        self.panel.show_extraction(path.name, 0.0, "starting")
        current, model = self.docs, self._model

        def work(progress: Callable[[float, str], None]) -> tuple[DocumentSet, Attachment]:
            # The tokenizer is opened here, never on the GUI thread (the first open reads the vocabulary).
            ds = current if current is not None else self._new_set()
            doc = extract(path, progress=progress, cancel=cancel)
            progress(1.0, "counting tokens")
            return ds, ds.prepare(doc)

        def done(result: tuple[DocumentSet, Attachment]) -> None:
            ds, att = result
            self._busy = False
            self.panel.hide_extraction()
            if self.docs is None and self._model == model:
                self.docs = ds
            if self.docs is ds:
                ds.add_prepared(att)
                if self.chat_id is not None:
                    self.store.attach(self.chat_id, att.document)
                self.status.emit(f"Attached {att.name}: {att.tokens} tokens")
                self._refresh()
            self._next()

        def failed(exc: BaseException) -> None:
            self._busy = False
            self.panel.hide_extraction()
            text = describe_error(exc, context=f"reading {path.name}")
            self.panel.show_error(text)
            self.status.emit(text)
            self._next()

        self._start(work, done, failed, lambda f, t: self.panel.show_extraction(path.name, f, t))

    def cancel_extraction(self) -> None:
        self._queue.clear()
        if self._cancel is not None:
            self._cancel.set()

    def remove(self, sha256: str) -> None:
        if self.docs is None:
            return
        self.docs.remove(sha256)
        if self.chat_id is not None:
            self.store.detach(self.chat_id, sha256)
        self._refresh()

    def _refresh(self) -> None:
        self.panel.set_attachments(self.attachments)
        self.refit()

    def _failed(self, exc: BaseException) -> None:
        text = describe_error(exc, context="preparing the documents")
        self.panel.show_error(text)
        self.status.emit(text)

    # -- chats ---------------------------------------------------------------------------------
    def set_chat(self, chat_id: int | None) -> None:
        """Another chat is shown: its documents (from the store, no re-extraction) and turn records."""
        self.chat_id = chat_id
        self.turns = {}
        self.last_given = None
        self.panel.set_context(None)
        self.panel.hide_error()
        if chat_id is not None:
            self.turns = self.store.turns(chat_id)
            if self.turns:
                self.last_given = self.turns[max(self.turns)]
                self.panel.set_context(self.last_given)
        self.docs = None
        if chat_id is None or self._model is None:
            # Without a model there is no tokenizer yet: set_plan counts the chat's documents.
            self._refresh()
            return
        docs = self.store.documents(chat_id)
        if docs:
            self._recount(docs)
        else:
            self._refresh()

    def bind_chat(self, chat_id: int) -> None:
        """A new chat was just saved: documents attached before it existed are stored with it."""
        self.chat_id = chat_id
        for att in self.attachments:
            self.store.attach(chat_id, att.document)

    def forget_chat(self, chat_id: int) -> None:
        self.store.forget_chat(chat_id)

    # -- turns ---------------------------------------------------------------------------------
    def mode_for(self, n_ctx: int) -> str:
        """Whole text when it fits the loaded context with room to answer, else retrieval."""
        assert self.docs is not None
        return "full" if needed_context(self.docs.doc_tokens, self.reply_tokens) <= n_ctx else "retrieval"

    def compose(
        self, system_prompt: str, history: Sequence[Message], question: str, images: tuple[str, ...] = ()
    ) -> Composed:
        """The messages for this turn. `history` is the chat without its system prompt and without
        the new question, indexed by message position; every turn keeps its images, and the
        question gets `images`."""
        assert self.docs is not None
        n_ctx = self.engine.n_ctx
        plan = self.engine.plan
        projector = plan.memory.projector if plan is not None else None
        recorded = {i: g.user_content for i, g in self.turns.items() if i < len(history)}
        composed = self.docs.compose(
            system_prompt,
            history,
            question,
            mode=self.mode_for(n_ctx),  # type: ignore[arg-type]  # mode_for returns one of the mode literals
            n_ctx=n_ctx,
            reply_tokens=self.reply_tokens,
            recorded=recorded,
            question_images=images,
            projector=projector.spec if projector is not None else None,
        )
        self.last_given = composed.given
        self.panel.set_context(composed.given)
        return composed

    def reply_done(self, position: int, text: str, *, save_state: bool = True) -> str:
        """Record what the question at `position` was given; save the cache. Returns the sources line."""
        given = self.last_given
        if given is None:
            return ""
        self.turns[position] = given
        if self.chat_id is not None:
            self.store.record_turn(self.chat_id, position, given)
        if save_state:
            self.save_state()
        return sources_line(text, given)

    # -- saved KV state ------------------------------------------------------------------------
    def saved_state_key(self) -> str | None:
        """The key the chat's KV cache is saved under now (model file, plan, documents), or None."""
        if not self.docs or not self.engine.loaded or self.engine.model_path is None or self.engine.settings is None:
            return None
        return state_key(self.engine.model_path, self.engine.settings, self.docs.hashes)

    def save_state(self) -> None:
        """Save the KV cache after a reply, on the engine thread (it owns every llama.cpp call)."""
        key = self.saved_state_key()
        if key is None:
            return
        self.engine_thread.run(
            lambda engine: self.kv.save(engine, key),
            failed=lambda exc: self.status.emit(f"Could not save the model state: {describe_error(exc)}"),
        )

    def restore_state(self) -> None:
        """After a load, with the chat's documents and an unchanged plan: the saved cache replaces
        re-reading the documents, unless it fails its checks (then it is dropped and the documents
        are read again with the next question, and the status says why)."""
        key = self.saved_state_key()
        if key is None or not self.kv.has(key):
            return

        def done(restored: object) -> None:
            dropped = getattr(restored, "dropped", "")
            if dropped:
                self.status.emit(f"The saved model state was not used ({dropped}); the documents are read again")
            elif restored is not None:
                n = getattr(restored, "tokens", 0)
                s = getattr(restored, "seconds", 0.0)
                self.status.emit(f"Restored the saved model state ({n} tokens) in {s:.1f} s instead of re-reading")

        self.engine_thread.run(lambda engine: self.kv.restore(engine, key), done, self._failed)

    # -- prompt progress -----------------------------------------------------------------------
    def _show_prompt_progress(self, p: PromptProgress) -> None:
        if p.total >= PROGRESS_MIN_TOKENS and p.done < p.total:
            self.panel.show_prompt_progress(p)
        elif p.done >= p.total:
            self.panel.hide_prompt_progress()

    def shutdown(self) -> None:
        self.cancel_extraction()
        self.engine.prompt_progress = None
