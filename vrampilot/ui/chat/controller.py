"""The open chat: its state, its turns, its backend, and getting a reply for it.

One state instead of a set of flags: IDLE (a message can be sent), LOADING (a question waits for
the model to load) and GENERATING (a reply streams). Every path out of LOADING and GENERATING,
including failures and Stop, comes back to IDLE with the view usable, and a question that got no
reply (stopped before its first token, a failed load, a crash last time) is offered "Answer"
instead of being asked twice. Turns are stored through the Qt-free conversation service; the
reply comes from the chat's backend on the engine thread.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from vrampilot.agents import ToolLoop
from vrampilot.engine import (
    ChatBackend,
    ContextOverflow,
    Engine,
    LlamaCppBackend,
    LoadResult,
    Message,
    Reply,
    SamplingParams,
    format_summary,
)
from vrampilot.log import describe_error
from vrampilot.message import TurnDrop
from vrampilot.meters.kvcache import KvCacheUsage
from vrampilot.planner.plan import Plan
from vrampilot.server.backend import ServerBackend
from vrampilot.storage import (
    BACKEND_HYBRID,
    BACKEND_LLAMA,
    DAMAGED,
    IMAGE_FILE_SUFFIXES,
    ImageFileError,
    StorageError,
    StoredMessage,
    is_hybrid,
    read_image,
)
from vrampilot.tool_turn import ToolRound, ToolStep
from vrampilot.ui.agents.approval import GuiApprover
from vrampilot.ui.agents.controller import AgentsController
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.chat import backend_choice
from vrampilot.ui.chat.chat_list import ChatList
from vrampilot.ui.chat.documents_controller import DocumentsController
from vrampilot.ui.chat.view import ChatView
from vrampilot.ui.plan.controller import PlanController
from vrampilot.units import format_tokens

ConfirmFn = Callable[[str, str], bool]


@dataclass(frozen=True)
class ToolsCapped:
    """The tool loop reached the rounds cap: the last answer was asked without tools."""

    rounds: int


class ChatState(enum.Enum):
    IDLE = "idle"
    LOADING = "loading"  # the model loads for a question that waits
    GENERATING = "generating"


def summary_line(stats: dict[str, Any] | None) -> str:
    """The line under a reply: the engine's stats, and the hybrid cache's bytes when it made it."""
    if not stats:
        return ""
    text = format_summary(stats)
    kv = KvCacheUsage.from_stats(stats)
    if kv is not None and stats.get("completion_tokens", 0):
        text += f" · hybrid cache (torch), {kv.short_text()}"
    return text


def drop_text(drop: TurnDrop) -> str:
    """What "Drop oldest turns" would do, said before the user picks it."""
    n = drop.dropped
    if not drop.fits:
        return (
            f"Dropping every earlier turn ({n} messages) would still not leave room for the reply: "
            "only a larger context or fewer max tokens can."
        )
    if drop.kept == 0:
        return (
            f"Dropping the oldest turns would leave only your question: all {n} earlier messages would be "
            "hidden from the model, which then answers without the conversation."
        )
    return f"Dropping the oldest turns hides {n} of {n + drop.kept} earlier messages from the model; {drop.kept} stay."


class ChatController(QObject):
    state_changed = Signal(object)  # ChatState
    status = Signal(str)
    kv_usage = Signal(object)  # KvCacheUsage | None: the open chat's own cache, for the meters
    reply_measured = Signal(object)  # GenerationStats of a llama.cpp reply, for the meters

    def __init__(
        self,
        ctx: AppContext,
        view: ChatView,
        chat_list: ChatList,
        plans: PlanController,
        documents: DocumentsController,
        *,
        confirm: ConfirmFn,
        agents: AgentsController | None = None,
        approver: GuiApprover | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.ctx = ctx
        # The MCP servers and the approval dialog ("Use tools"); None where the window has none.
        self.agents, self.approver = agents, approver
        self._answer_when_served = False  # "Serve and answer": the tools wait for llama-server
        self._capped: ToolsCapped | None = None
        self.chats = ctx.conversations
        self.view = view
        self.chat_list = chat_list
        self.plans = plans
        self.documents = documents
        self.confirm = confirm
        self.state = ChatState.IDLE
        self.chat_id: int | None = None
        # Tokens the open chat's last reply had in context: what the backend list sizes each hybrid
        # config at. Kept here so that listing it (on every plan) never reads the database.
        self._context_used = 0
        self.editing: int | None = None
        self.backend_key = BACKEND_LLAMA
        self.backend: ChatBackend = LlamaCppBackend()
        # The running llama-server (vrampilot.ui.server.controller), which answers llama.cpp chats
        # on its model instead of a second in-process copy; None when the app does not serve.
        self.served: ChatBackend | None = None
        self.replying: ChatBackend = self.backend  # the one the current (or last) reply came from
        self._learn_speed = False  # the current reply is timed for the speed model
        # The served plan whose drafting the current reply teaches (its acceptance), else None.
        self._learn_drafting: Plan | None = None
        # Model path -> why the chosen backend cannot run it (None: it can), as checked so far.
        self.model_checks: dict[str, str | None] = {}
        self._unsaved: tuple[int, str, dict[str, Any]] | None = None  # a reply the disk refused
        self._continuing: StoredMessage | None = None  # the reply "Continue" goes on from

        view.send_requested.connect(self.send)
        view.stop_requested.connect(self.stop)
        view.regenerate_requested.connect(self.regenerate)
        view.edit_requested.connect(self.begin_edit)
        view.system_prompt_changed.connect(self.set_system_prompt)
        view.sampling_changed.connect(ctx.prefs.set_sampling)
        view.enter_sends_changed.connect(ctx.prefs.set_enter_sends)
        view.backend_changed.connect(self.set_backend)
        # Unavailable backends are listed greyed (backend_choice.choices): the user learns they exist.
        self.refresh_backend_choices()
        chat_list.chat_selected.connect(self.open_chat)
        chat_list.new_chat_requested.connect(self.new_chat)
        chat_list.search_changed.connect(lambda _t: self.refresh_list())
        chat_list.delete_requested.connect(self.delete)
        view.files_attached.connect(self.attach_files)
        # The documents' panel sits above the banner; their one-click fix re-plans with more context.
        view.show_documents(documents.panel)
        documents.replan_requested.connect(lambda n_ctx: plans.replan_and_load(replace(plans.pins, n_ctx=n_ctx)))
        plans.plan_shown.connect(self._plan_shown)
        plans.model_failed.connect(view.show_model_failure)
        plans.model_read.connect(lambda _path: view.model_read())
        plans.loaded.connect(self._model_loaded)
        plans.load_state_changed.connect(lambda _s: self.update_hint())
        engine = ctx.engine
        engine.text.connect(self._text)
        engine.replied.connect(self._replied)
        engine.chat_failed.connect(self._failed)
        engine.report.connect(self._report)

    def restore(self) -> None:
        """The chat settings kept from the last session, and the chat open then (or a new one)."""
        prefs = self.ctx.prefs
        self.view.set_sampling_params(prefs.sampling())
        self.view.set_enter_sends(prefs.enter_sends())
        self.view.set_system_prompt(prefs.default_system_prompt())
        self.refresh_list()
        last = prefs.last_chat()
        if last is not None and last in self.chat_list.ids():
            self.open_chat(last)
        else:
            self.new_chat()

    # -- what the plan controller reports ------------------------------------------------------
    def _plan_shown(self, p: Plan) -> None:
        self.documents.reply_tokens = self.view.sampling_params().max_tokens
        self.documents.set_plan(p)
        self.check_model()
        self.update_hint()

    def _model_loaded(self, result: LoadResult) -> None:
        self.documents.restore_state()
        if result.changes:
            msg = "llama.cpp could not allocate the plan; backed off: " + "; ".join(result.changes)
            self.view.show_banner(msg, [("banner_ok", "OK", self.view.hide_banner)])

    # -- state ---------------------------------------------------------------------------------
    def _set_state(self, state: ChatState) -> None:
        if state is self.state:
            return
        self.state = state
        self.view.set_busy(state is not ChatState.IDLE)
        self.plans.set_chat_busy(state is ChatState.GENERATING)
        self.state_changed.emit(state)

    @property
    def busy(self) -> bool:
        return self.state is not ChatState.IDLE

    # -- chats ---------------------------------------------------------------------------------
    def refresh_list(self) -> None:
        query = self.chat_list.query()
        chats = self.chats.summaries(query)
        self.chat_list.set_chats(chats, self.chat_id, query=query)

    def new_chat(self) -> None:
        if self.busy:
            return
        self.chat_id = None
        self._context_used = 0
        self.editing = None
        self.ctx.prefs.set_last_chat(None)
        self.view.clear_messages()
        self.view.hide_banner()
        self.view.set_title("New chat")
        self.view.set_system_prompt(self.ctx.prefs.default_system_prompt())
        self._show_backend(BACKEND_LLAMA)
        self.documents.set_chat(None)
        self.chat_list.clear_current()
        self.status.emit("")
        self.view.focus_input()

    def open_chat(self, chat_id: int) -> None:
        if self.busy or chat_id == self.chat_id:
            return
        chat = self.chats.chat(chat_id)
        self.chat_id = chat.id
        self._context_used = next(
            (int(m.stats.get("context_used", 0)) for m in reversed(chat.messages) if m.role == "assistant" and m.stats),
            0,
        )
        self.editing = None
        self.ctx.prefs.set_last_chat(chat.id)
        self.view.clear_messages()
        self.view.hide_banner()
        self.view.set_title(chat.title)
        self.view.set_system_prompt(chat.system_prompt)
        self._show_backend(chat.backend)
        self.documents.set_chat(chat.id)
        self._add_all(chat.messages)
        self.status.emit("")
        self._offer_answer()
        self.refresh_list()

    def rename(self, chat_id: int, title: str) -> None:
        title = self.chats.rename(chat_id, title)
        if chat_id == self.chat_id:
            self.view.set_title(title)
        self.refresh_list()

    def delete(self, chat_id: int) -> None:
        title = self.chats.chat(chat_id).title
        if not self.confirm("Delete chat?", f"Delete “{title}” and all its messages?"):
            return
        self.chats.delete(chat_id)
        self.ctx.documents.forget_chat(chat_id)
        if chat_id == self.chat_id:
            self.new_chat()
        self.refresh_list()

    def set_system_prompt(self, text: str) -> None:
        self.ctx.prefs.set_default_system_prompt(text)
        if self.chat_id is not None:
            self.chats.set_system_prompt(self.chat_id, text)
        self.view.set_system_prompt(text)

    def update_hint(self) -> None:
        """What the empty chat says: which model answers, and whether it loads first; and the bytes
        the backend selector lists, which follow the model too."""
        self.refresh_backend_choices()
        p = self.plans.plan
        if p is None:
            return
        name = p.spec.path.name
        if self._served_backend() is not None:
            self.view.set_empty_hint(f"{name} is served by llama-server (Server tab). Type a message below.")
        elif self.plans.is_loaded(p.spec.path):
            self.view.set_empty_hint(f"{name} is loaded. Type a message below.")
        else:
            self.view.set_empty_hint(f"{name} is selected. Type a message below: it loads with the plan on the right.")

    def export(self, chat_id: int, fmt: str, path: Path) -> None:
        try:
            self.chats.export(chat_id, fmt, path)
        except OSError as exc:
            self.status.emit(f"Could not export to {path}: {exc.strerror or exc}")
            return
        self.status.emit(f"Exported to {path}")

    # -- images --------------------------------------------------------------------------------
    def attach_files(self, paths: Sequence[Path]) -> None:
        """Attach and a drop hand over: images wait to be sent with the next message; anything else
        is attached to the chat as a document (which says so when it cannot read it)."""
        images = [p for p in paths if p.suffix.lower() in IMAGE_FILE_SUFFIXES]
        if images:
            self.attach(images)
        docs = [p for p in paths if p not in images]
        if docs:
            self.documents.attach_files(docs)

    def attach(self, paths: Sequence[Path]) -> None:
        """Images for the next message: each checked as the engine would (size, format) and decoded
        for its thumbnail now, so a bad one is refused here, in one line, with nothing else lost."""
        from PySide6.QtGui import QImage

        refused: list[str] = []
        if paths and (why := self._no_projector()):
            # Refused here, not at Send: a thumbnail would promise what no setting can give. (A
            # projector that is only turned off is said at Send, where ticking it is the answer.)
            self.view.show_banner(f"Not attached: {why}.", [("banner_ok", "OK", self.view.hide_banner)])
            self.status.emit(f"Not attached: {why}")
            return
        for path in paths:
            try:
                data = read_image(path)
            except ImageFileError as exc:
                refused.append(str(exc))
                continue
            image = QImage.fromData(data)
            if image.isNull():
                refused.append(f"{Path(path).name}: {DAMAGED}")
                continue
            self.view.add_pending_image(Path(path), image)
        if refused:
            text = "Not attached: " + "; ".join(refused)
            self.view.show_banner(text, [("banner_ok", "OK", self.view.hide_banner)])
            self.status.emit(text)
        self.view.focus_input()

    def _no_projector(self) -> str | None:
        """Why the in-app model can never read images (None: it can, or the chat is not its): it has
        no vision projector to turn on. The checkbox is disabled then: advice to tick it would be
        advice nobody can follow."""
        p = self.plans.plan
        if is_hybrid(self.backend_key) or self._served_backend() is not None or self.plans.projector_available():
            return None
        if p is not None and p.settings.mmproj_path:
            return None
        name = self.plans.model_path.name if self.plans.model_path is not None else "this model"
        return (
            f"{name} reads no images: it has no vision projector (mmproj*.gguf) beside it; pick a vision "
            "model, or download one with its projector in the Hub tab"
        )

    def _images_refused(self) -> str | None:
        """Why the open chat cannot show the model images now (None: it can): the hybrid backend
        reads none, and the in-app engine needs the plan's vision projector. A served model is the
        server's to judge (it answers without a projector in one line)."""
        if is_hybrid(self.backend_key):
            return (
                "the experimental hybrid backend reads no images: switch this chat's backend to llama.cpp "
                "to ask about them"
            )
        if self._served_backend() is not None:
            return None
        p = self.plans.plan
        if p is None or not p.settings.mmproj_path:
            if (why := self._no_projector()) is not None:
                return why
            return (
                "images need the model's vision projector: turn on “Vision projector” in the Plan panel's "
                "settings (it finds the mmproj file beside the model)"
            )
        return None

    # -- turns ---------------------------------------------------------------------------------
    def send(self, text: str) -> None:
        attached = self.view.pending_images()
        if self.busy or not (text.strip() or attached):
            return
        if attached and (why := self._images_refused()):
            # Nothing is stored: the text and the images stay where they are.
            self.view.show_banner(f"Not sent: {why}.", [("banner_ok", "OK", self.view.hide_banner)])
            self.status.emit(f"Not sent: {why}")
            return
        try:
            images = self.chats.keep_images(attached)
            if self.chat_id is None:
                model = self.plans.model_path
                chat = self.chats.create(
                    model_path=str(model) if model else None,
                    system_prompt=self.view.system_prompt_text(),
                    backend=self.backend_key,
                )
                self.chat_id = chat.id
                self.ctx.prefs.set_last_chat(chat.id)
                self.documents.bind_chat(chat.id)
            if self.editing is not None:
                question = self.chats.replace_from(self.chat_id, self.editing, text, images or None)
                self.editing = None
            else:
                question = self.chats.ask(self.chat_id, text, images)
        except (StorageError, ImageFileError) as exc:
            # Nothing was stored: the text stays in the input, and the banner says why.
            self.view.show_banner(f"Not sent: {exc}", [("banner_ok", "OK", self.view.hide_banner)])
            self.status.emit(f"Not sent: {exc}")
            return
        self.view.hide_banner()
        self.view.clear_input()
        self._show_messages()
        if question.joined:
            self.status.emit("Added to your earlier question, which had no reply")
        self.refresh_list()
        self._reply()

    def answer(self) -> None:
        """Reply to the chat's last question, which has none yet."""
        if self.busy or self.chat_id is None or self.chats.unanswered(self.chat_id) is None:
            return
        self.view.hide_banner()
        self._reply()

    def regenerate(self) -> None:
        if self.busy or self.chat_id is None or not self.chats.drop_last_reply(self.chat_id):
            return
        self._show_messages()
        self._reply()

    def begin_edit(self, position: int) -> None:
        if self.busy or self.chat_id is None:
            return
        msgs = {m.position: m for m in self.chats.messages(self.chat_id)}
        if position not in msgs or msgs[position].role != "user":
            return
        self.editing = position
        self.view.set_input(msgs[position].content)
        self.view.focus_input()
        self.view.show_banner(
            "Editing an earlier message: sending replaces it and everything after it.",
            [("cancel_edit", "Cancel edit", self.cancel_edit)],
        )

    def cancel_edit(self) -> None:
        self.editing = None
        self.view.clear_input()
        self.view.hide_banner()

    def stop(self) -> None:
        if self.state is ChatState.GENERATING:
            self.ctx.engine.stop()
        elif self.state is ChatState.LOADING:
            self.plans.cancel_load()

    def _show_messages(self) -> None:
        assert self.chat_id is not None
        chat = self.chats.chat(self.chat_id)
        self.view.clear_messages()
        self.view.set_title(chat.title)
        self._add_all(chat.messages)

    def _add_all(self, messages: Sequence[StoredMessage]) -> None:
        for m in messages:
            self._add_stored(m)
        # What the latest reply did not see ("Drop oldest turns"), marked where it is.
        last = next((m for m in reversed(messages) if m.role == "assistant"), None)
        self.view.mark_unseen(int((last.stats or {}).get("dropped_messages", 0)) if last is not None else 0)

    def _add_stored(self, m: StoredMessage) -> None:
        if m.tool_round is not None:  # a round of tool calls, shown again as it ran
            self.view.add_tool_round(m.position, m.tool_round)
            return
        images = [(self.chats.images.path(i), i.name or i.file_name) for i in m.images]
        self.view.add_message(m.position, m.role, m.content, summary_line(m.stats), images=images)

    def _offer_answer(self) -> None:
        if self.chat_id is not None and self.chats.unanswered(self.chat_id) is not None:
            self.view.show_banner(
                "Your last question has no reply yet.",
                [("answer", "Answer", self.answer), ("banner_ok", "Dismiss", self.view.hide_banner)],
            )

    # -- getting a reply -----------------------------------------------------------------------
    def _reply(self, *, trim: bool = False) -> None:
        """Reply to the stored conversation; load the model first when it is not loaded, or was
        loaded before the user changed the settings (what they set is what answers)."""
        if self._tools_on() and not isinstance(self._served_backend(), ServerBackend):
            self._ask_to_serve()  # before loading: the in-app engine cannot run tools
            return
        if self.plans.loaded_answers() or self._served_backend() is not None:
            self._generate(trim=trim)
            return
        self._set_state(ChatState.LOADING)
        profile = self.plans.profile_shown()
        if profile is not None:
            # Said where the user looks: "Plan for" goes back to this machine, which can load it.
            self.view.show_banner(
                f"Loading the model with this machine's plan: the plan shown was for {profile}, a GPU this "
                "machine does not have (“Plan for” is back on This machine)…"
            )
        elif self.plans.is_loaded(self.plans.model_path):
            self.view.show_banner("Applying the changed settings: loading the model with the plan on the right…")
        else:
            self.view.show_banner("Loading the model with the plan on the right…")
        self.plans.load(lambda _r: self._generate(trim=trim), self._not_loaded)

    def _not_loaded(self, why: str) -> None:
        self._continuing = None
        self._set_state(ChatState.IDLE)
        self.view.show_banner(
            f"No reply: the model did not load ({why}).",
            [("answer", "Try again", self.answer), ("banner_ok", "OK", self.view.hide_banner)],
        )

    def _generate(self, *, trim: bool = False) -> None:
        if self.chat_id is None:
            self._set_state(ChatState.IDLE)
            return
        self.view.hide_banner()
        messages: Sequence[Message] = self.chats.for_model(self.chat_id)
        sampling = self.view.sampling_params()
        served = self._served_backend()
        if served is not None and self.documents.active:
            # The documents' passages and saved caches belong to the in-process engine.
            self._set_state(ChatState.IDLE)
            self.view.show_banner(
                "This chat has documents, which only the in-app model reads: stop the server (Server tab) "
                "to ask about them. Your question is kept.",
                [("banner_ok", "OK", self.view.hide_banner)],
            )
            return
        if self._tools_on() and self.agents is not None and self.approver is not None:
            self._generate_with_tools(list(messages), sampling, served, self.agents, self.approver)
            return
        if self.documents.active and self.ctx.engine.engine.loaded:
            # The documents go into the prompt: whole, or the passages retrieved for this question.
            self.documents.reply_tokens = sampling.max_tokens
            system = messages[0].content if messages and messages[0].role == "system" else ""
            turns = [m for m in messages if m.role != "system"]
            # Every kept turn's images go with the composed prompt, the question's with its text.
            messages = list(self.documents.compose(system, turns[:-1], turns[-1].content, turns[-1].images).messages)
        if served is not None:
            backend = served
        else:
            self._ensure_backend()
            backend = self.backend
        self.replying = backend
        # In-process llama.cpp replies teach the speed model (a served or hybrid one runs elsewhere).
        # Nor does one with images: encoding an image is not reading a prompt.
        self._learn_speed = served is None and self.backend_key == BACKEND_LLAMA and not any(m.images for m in messages)
        # A served reply that drafted (llama-server's counts) teaches the drafting's acceptance
        # as an in-app one does: MTP drafting runs only there.
        served_plan = getattr(served, "plan", None)
        self._learn_drafting = served_plan if isinstance(served_plan, Plan) and served_plan.settings.drafting else None
        if self._learn_speed or self._learn_drafting is not None:
            self.plans.speed.reply_started()
        position = len(self.chats.messages(self.chat_id))
        self._set_state(ChatState.GENERATING)
        if self._continuing is not None:
            self.view.resume_reply(self._continuing.content)
        else:
            self.view.begin_reply(position)
        self.status.emit(backend.status_text())
        messages = list(messages)

        def job(
            engine: Engine, on_text: Callable[[str], None], on_report: Callable[[object], None], cancel: threading.Event
        ) -> Reply:
            return backend.reply(
                engine, messages, sampling, on_text=on_text, on_report=on_report, cancel=cancel, trim=trim
            )

        self.ctx.engine.run_chat(job)

    def _generate_with_tools(
        self,
        messages: list[Message],
        sampling: SamplingParams,
        served: ChatBackend | None,
        agents: AgentsController,
        approver: GuiApprover,
    ) -> None:
        """A reply through the tool loop (vrampilot.agents.loop): llama-server parses the model's
        calls, each call is asked in a dialog, the results go back to the model, and each round is
        stored as it ends. Runs on the engine thread as any reply does; Stop ends it."""
        assert self.chat_id is not None
        if not isinstance(served, ServerBackend):
            self._ask_to_serve()
            return
        manager, catalog = agents.manager, agents.catalog()
        if manager is None or not catalog:
            self._set_state(ChatState.IDLE)
            self.view.show_banner(
                "No MCP tool is ready: add a server or see why one failed in the MCP servers tab (or turn off "
                "“Use tools”). Your question is kept.",
                [("banner_ok", "OK", self.view.hide_banner)],
            )
            return
        self.replying = served
        self._learn_speed, self._learn_drafting, self._capped = False, None, None
        position = len(self.chats.messages(self.chat_id))
        self._set_state(ChatState.GENERATING)
        self.view.begin_reply(position)
        n = len(catalog.offered)
        self.status.emit(f"Generating with {n} tool{'s' if n != 1 else ''} (served by llama-server)…")
        tools = self.view.tool_settings()
        rounds, choice, policy = tools.rounds, tools.choice, agents.policy

        def job(
            _engine: Engine,
            on_text: Callable[[str], None],
            on_report: Callable[[object], None],
            cancel: threading.Event,
        ) -> Reply:
            # "Call a tool first": the first round is "required" and its reply starts inside the call
            # (the template's opener), one call, so a small model calls rather than writing text.
            forced = choice == "required"
            loop = ToolLoop(
                served,
                manager,
                catalog,
                approver.for_reply(cancel),
                policy,
                max_rounds=rounds,
                first_choice=choice,
                parallel_calls=not forced,
                first_start=served.call_opener(catalog.api_tools()) if forced else "",
                # a quarter of the context for one result, at about 3 characters a token (as the CLI)
                result_budget_chars=max(2_000, served.n_ctx() // 4 * 3),
                on_step=on_report,
                on_round=on_report,  # stored on the GUI thread, in order, before the next round's text
            )
            result = loop.run(messages, sampling, on_text=on_text, cancel=cancel)
            if result.capped:
                on_report(ToolsCapped(rounds))
            if result.reply.tool_calls:  # stopped after a round: its text is stored with the round
                return Reply("", replace(result.reply.stats, stop_reason="cancelled"))
            return result.reply

        self.ctx.engine.run_chat(job)

    def _tools_on(self) -> bool:
        return self.agents is not None and self.view.tool_settings().on

    def _ask_to_serve(self) -> None:
        self._set_state(ChatState.IDLE)
        self.view.show_banner(
            "Tools run through llama-server, which reads the model's tool calls: serve the model to use them "
            "(or turn off “Use tools”). Your question is kept.",
            [
                ("serve_for_tools", "Serve and answer", self._serve_then_answer),
                ("banner_ok", "OK", self.view.hide_banner),
            ],
        )

    def _serve_then_answer(self) -> None:
        self.view.hide_banner()
        self._answer_when_served = True
        self.plans.serve_requested.emit()

    def _tool_report(self, item: object) -> None:
        if self.state is not ChatState.GENERATING or self.chat_id is None:
            return
        if isinstance(item, ToolStep):
            self.view.add_tool_step(item)
        elif isinstance(item, ToolRound):
            try:
                stored = self.chats.add_tool_round(self.chat_id, item)
            except StorageError as exc:
                self.status.emit(f"A round of tool calls was not saved: {exc}")
                next_position = len(self.view.messages())
            else:
                next_position = stored.position + 1
            self.view.end_tool_round(item.text, next_position)
        elif isinstance(item, ToolsCapped):
            self._capped = item

    def _text(self, text: str) -> None:
        if self.state is ChatState.GENERATING:
            self.view.append_reply_text(text)

    def _replied(self, reply: Reply) -> None:
        if self.state is not ChatState.GENERATING:
            return
        self._set_state(ChatState.IDLE)
        stats: dict[str, Any] = reply.stats.to_dict()
        kv = getattr(reply, "kv", None)  # a HybridReply's (vrampilot.hybrid may be absent: no isinstance)
        if isinstance(kv, KvCacheUsage):
            # Kept with the message, so the bytes are still there when the chat is reopened.
            stats["backend"] = BACKEND_HYBRID
            stats["hybrid_config"] = self.backend_key.split(":", 1)[-1] if ":" in self.backend_key else "default"
            stats.update(kv.to_dict())
            self.kv_usage.emit(kv)
        elif reply.stats.decode_tps > 0:
            self.reply_measured.emit(reply.stats)
        if self._learn_speed:
            loaded = self.plans.load_result
            self.plans.speed.reply_finished(loaded.plan if loaded is not None else None, reply.stats)
        elif self._learn_drafting is not None:
            self.plans.speed.reply_finished(self._learn_drafting, reply.stats)
        if self._continuing is not None:
            self._continued(reply, stats)
            return
        if self.chat_id is None or (not reply.text and reply.stats.stop_reason == "cancelled"):
            # Stopped before the first token: nothing to keep, and the question waits for "Answer".
            self.view.drop_reply()
            self.status.emit("Stopped before the first token")
            self._offer_answer()
            return
        self._store_reply(self.chat_id, reply.text, stats, save_state=kv is None)
        if self._capped is not None:
            self.view.show_banner(
                f"The model called tools for {self._capped.rounds} round{'s' if self._capped.rounds != 1 else ''}, "
                "the most this chat allows: it was asked to answer without them.",
                [("banner_ok", "OK", self.view.hide_banner)],
            )
            self._capped = None
        self._context_used = int(stats.get("context_used", 0))
        self.refresh_backend_choices()
        self._offer_continue(stats)

    # -- Continue: a reply cut by max tokens goes on ---------------------------------------------
    def _continuable(self) -> StoredMessage | None:
        """The open chat's last message when it is a reply cut by max tokens that the in-app
        llama.cpp model can go on from (the template leaves it open: engine/template.py; a served
        or hybrid reply, or one composed with documents, would be answered anew instead)."""
        if self.chat_id is None or self.busy or self.backend_key != BACKEND_LLAMA or self.documents.active:
            return None
        if self._served_backend() is not None:
            return None
        msgs = self.chats.messages(self.chat_id)
        last = msgs[-1] if msgs else None
        if last is None or last.role != "assistant" or (last.stats or {}).get("stop_reason") != "length":
            return None
        return last

    def _offer_continue(self, stats: dict[str, Any]) -> None:
        if stats.get("stop_reason") == "length" and self._continuable() is not None:
            self.view.show_banner(
                "The reply stopped at max tokens.",
                [("continue_reply", "Continue", self.continue_reply), ("banner_ok", "Dismiss", self.view.hide_banner)],
            )

    def continue_reply(self) -> None:
        """Generate more of the last reply, appended to it (the model reads it as its own words)."""
        last = self._continuable()
        if last is None:
            return
        self.view.hide_banner()
        self._continuing = last
        self._reply()

    def _continued(self, reply: Reply, stats: dict[str, Any]) -> None:
        old, self._continuing = self._continuing, None
        assert old is not None and self.chat_id is not None
        text = old.content + reply.text
        # The line under it counts the whole reply's tokens; the rest is this turn's.
        stats["completion_tokens"] = int((old.stats or {}).get("completion_tokens", 0)) + reply.stats.completion_tokens
        try:
            self.chats.store.update_message(old.id, text, stats)
        except StorageError as exc:
            self.view.finish_reply(old.content, summary_line(old.stats))
            self.status.emit(f"Continuation not saved: {exc}")
            return
        self.view.finish_reply(text, summary_line(stats))
        self.status.emit(summary_line(stats))
        self._context_used = int(stats.get("context_used", 0))
        self.refresh_list()
        self._offer_continue(stats)

    def _store_reply(self, chat_id: int, text: str, stats: dict[str, Any], *, save_state: bool) -> None:
        try:
            stored: StoredMessage = self.chats.add_reply(chat_id, text, stats)
        except StorageError as exc:
            # The reply stays on screen; saving is offered again (or exporting it).
            self._unsaved = (chat_id, text, stats)
            self.view.finish_reply(text, summary_line(stats) + " · not saved")
            self.view.show_banner(
                f"This reply is not saved: {exc}.",
                [("save_again", "Save again", self.save_unsaved), ("copy_reply", "Copy", self._copy_unsaved)],
            )
            self.status.emit(f"Reply not saved: {exc}")
            return
        self._unsaved = None
        summary = summary_line(stats)
        if self.documents.active:
            # llama.cpp's saved cache says nothing about a hybrid reply: nothing to save then.
            sources = self.documents.reply_done(stored.position - 1, text, save_state=save_state)
            summary += f" · {sources}" if sources else ""
        self.view.finish_reply(text, summary)
        self.view.mark_unseen(int(stats.get("dropped_messages", 0)))
        self.status.emit(summary_line(stats))
        self.refresh_list()

    def save_unsaved(self) -> None:
        if self._unsaved is None or self.busy:
            return
        chat_id, text, stats = self._unsaved
        try:
            self.chats.add_reply(chat_id, text, stats)
        except StorageError as exc:
            self.status.emit(f"Still not saved: {exc}")
            return
        self._unsaved = None
        self.view.hide_banner()
        if chat_id == self.chat_id:
            self._show_messages()
        self.status.emit("Reply saved")
        self.refresh_list()

    def _copy_unsaved(self) -> None:
        from PySide6.QtGui import QGuiApplication

        if self._unsaved is not None:
            QGuiApplication.clipboard().setText(self._unsaved[1])
            self.status.emit("Reply copied")

    def _failed(self, exc: BaseException) -> None:
        if self.state is not ChatState.GENERATING:
            return
        if self._learn_speed or self._learn_drafting is not None:
            self.plans.speed.reply_finished(None, None)
        self._set_state(ChatState.IDLE)
        if self._continuing is not None:
            # The reply it went on from stays as it was.
            old, self._continuing = self._continuing, None
            self.view.finish_reply(old.content, summary_line(old.stats))
        else:
            self.view.drop_reply()
        if isinstance(exc, ContextOverflow):
            needed = exc.prompt_tokens + exc.max_tokens
            bigger = 1 << math.ceil(math.log2(max(needed, 512)))
            actions: list[tuple[str, str, object]] = []
            replan = (
                "replan_bigger",
                f"Re-plan with {format_tokens(bigger)} context",
                lambda: self.replan_and_answer(bigger),
            )
            drop = exc.drop
            turns = (
                self.chat_id is not None and sum(1 for m in self.chats.for_model(self.chat_id) if m.role == "user") > 1
            )
            text = f"This conversation would overflow the context: {exc}."
            if turns:
                # A backend that did not count the drop (the hybrid cache) offers it unsized.
                text += " " + drop_text(drop) if drop is not None else ""
                label = "Drop oldest turns"
                if drop is not None:
                    label = "Drop all earlier turns" if drop.kept == 0 else f"Drop the {drop.dropped} oldest messages"
                actions.append(("drop_oldest", label, lambda: self._reply(trim=True)))
                if drop is not None and drop.leaves_nothing and self.replying.replan_cures_overflow:
                    actions.insert(0, replan)  # the answer that keeps the conversation comes first
            if self.replying.replan_cures_overflow and replan not in actions:
                actions.append(replan)
            actions.append(("overflow_cancel", "Cancel", self.view.hide_banner))
            self.view.show_banner(text, actions)
            self.status.emit("Context would overflow: nothing was sent")
            return
        text = describe_error(exc, context="replying")
        self.view.show_banner(
            f"No reply: {text}", [("answer", "Try again", self.answer), ("banner_ok", "OK", self.view.hide_banner)]
        )
        self.status.emit(f"No reply: {text}")

    def replan_and_answer(self, n_ctx: int) -> None:
        """Re-plan with a larger context, load it, and answer the waiting question."""
        self.view.hide_banner()
        self.plans.set_pins(replace(self.plans.pins, n_ctx=n_ctx))
        self._reply()

    def _report(self, item: object) -> None:
        if isinstance(item, (ToolStep, ToolRound, ToolsCapped)):
            self._tool_report(item)
            return
        if isinstance(item, KvCacheUsage) and is_hybrid(self.backend_key):
            self.kv_usage.emit(item)
            if self.state is ChatState.GENERATING:
                self.status.emit(self.backend.status_text())

    # -- backends ------------------------------------------------------------------------------
    def _ensure_backend(self) -> None:
        """The chat's backend object, made for the current model (the hybrid one holds the chat's cache)."""
        model = self.plans.model_path
        if self.backend.key == self.backend_key and getattr(self.backend, "model_path", model) == model:
            return
        loaded = self.plans.load_result
        threads = loaded.plan.settings.n_threads if loaded is not None else None
        self.backend = backend_choice.make_backend(self.backend_key, model, threads=threads)

    def set_served(self, backend: ChatBackend | None) -> None:
        """The app started (a backend) or stopped (None) serving the planned model."""
        self.served = backend
        self.update_hint()
        if backend is not None and self._answer_when_served:
            self._answer_when_served = False
            self.answer()

    def _served_backend(self) -> ChatBackend | None:
        """The server, when it holds the selected model and the chat is a llama.cpp chat."""
        served = self.served
        if served is None or self.backend_key != BACKEND_LLAMA:
            return None
        return served if getattr(served, "model_path", None) == self.plans.model_path else None

    def set_backend(self, key: str) -> None:
        """The user picked a backend for the open chat: stored with it (a new chat takes it when saved)."""
        if self.busy:
            self.view.set_backend(self.backend_key)
            return
        if self.chat_id is not None:
            self.chats.set_backend(self.chat_id, key)
            self.refresh_list()
        self._show_backend(key)
        self.status.emit(f"This chat replies with {backend_choice.label(key)}")

    def _show_backend(self, key: str) -> None:
        """Show `key` as the open chat's backend: the selector, the note and the KV meter."""
        missing = backend_choice.unavailable(key)
        if missing:
            key = BACKEND_LLAMA
            self.view.set_backend_note(
                f"This chat was on {backend_choice.label(key)}; it replies with llama.cpp until that is available. {missing}."
            )
        else:
            self.view.set_backend_note(backend_choice.about(key))
        self.backend_key = key
        # Made for this chat on its first reply (a hybrid one holds the chat's own cache).
        self.backend = LlamaCppBackend()
        self.refresh_backend_choices()
        self.view.set_backend(key)
        self.kv_usage.emit(KvCacheUsage(0, 0, 0) if is_hybrid(key) else None)
        if is_hybrid(key):
            self.check_model()

    def refresh_backend_choices(self) -> None:
        """The selector's list, each hybrid config with the bytes it would hold at the open chat's
        length (the tokens of its last reply), or at the model's full context for a new chat."""
        n_tokens = self._context_used if self.chat_id is not None else 0
        self.view.set_backend_choices(backend_choice.choices(self.plans.spec, n_tokens))

    def check_model(self) -> None:
        """Can the chat's backend run the selected model? Asked off the GUI thread (imports torch)."""
        path = self.plans.model_path
        if path is None or self.backend_key == BACKEND_LLAMA:
            return
        key = str(path)
        if key in self.model_checks:
            self._model_checked(path, self.model_checks[key])
            return

        def done(reason: str | None) -> None:
            self.model_checks[key] = reason
            self._model_checked(path, reason)

        self.ctx.tasks.submit(
            lambda _t: backend_choice.model_problem(self.backend_key, path), done=done, key="backend-check", owner=self
        )

    def _model_checked(self, path: object, reason: str | None) -> None:
        if reason is None or path != self.plans.model_path or self.backend_key == BACKEND_LLAMA:
            return
        # Not for this model: the chat keeps llama.cpp, and the note says why.
        if self.chat_id is not None:
            self.chats.set_backend(self.chat_id, BACKEND_LLAMA)
        self.backend_key = BACKEND_LLAMA
        self.backend = LlamaCppBackend()
        self.view.set_backend(BACKEND_LLAMA)
        self.kv_usage.emit(None)
        self.view.set_backend_note(f"The hybrid backend cannot run this model: {reason}. This chat stays on llama.cpp.")
        self.status.emit(f"Hybrid backend: {reason}")
