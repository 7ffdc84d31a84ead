"""The main window: chats on the left, the conversation in the middle, machine, models and plan on
the right. It wires views to the core; every slow call goes through a worker."""

from __future__ import annotations

import json
import math
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from vrampilot.documents import SUPPORTED_PATTERNS, is_supported
from vrampilot.engine import ContextOverflow, Engine, LoadResult, Message, Reply, SamplingParams, format_summary
from vrampilot.export import llama_server_argv, quote
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.hardware import Machine, detect_machine, load_profiles
from vrampilot.meters import Sampler
from vrampilot.meters.kvcache import KvCacheUsage
from vrampilot.paths import embedded_model_path
from vrampilot.planner.search import Alternative, Pins, Plan, plan
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target, target_cpu_only, target_from_machine, target_from_profile
from vrampilot.storage import BACKEND_HYBRID, BACKEND_LLAMA, ChatStore, Library, connect, scan_folder, title_from
from vrampilot.ui.chat_list import ChatList
from vrampilot.ui.chat_view import ChatView
from vrampilot.ui.documents_controller import DocumentsController
from vrampilot.ui.hardware_view import HardwareView
from vrampilot.ui.hub_view import HubView
from vrampilot.ui.library_view import LibraryEntry, LibraryView, describe_entry
from vrampilot.ui.meters_feed import MetersFeed
from vrampilot.ui.meters_panel import MetersPanel, MetersStatusWidget
from vrampilot.ui.plan_view import SHELL_NAMES, PlanView
from vrampilot.ui.prefs import Prefs
from vrampilot.ui.workers import EngineThread, run_task
from vrampilot.units import format_tokens

try:
    # The installers leave vrampilot.hybrid out along with torch (packaging/vrampilot.spec), so the window
    # must run without the package, not only without torch. vrampilot.hybrid.chat itself never imports torch.
    from vrampilot.hybrid import chat as hybrid_backend
except ModuleNotFoundError:
    hybrid_backend = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from vrampilot.hybrid.chat import HybridChat

TARGET_MACHINE = "machine"
TARGET_CPU = "cpu"
PROFILE_PREFIX = "profile:"


def hybrid_unavailable() -> str | None:
    """Why this window cannot offer the hybrid backend (with how to get it), or None when it can."""
    if hybrid_backend is None:
        return (
            "This build leaves out the experimental hybrid backend and torch; to use it, install VRAM Pilot "
            "with pip: pip install 'vrampilot[hybrid]'"
        )
    if not hybrid_backend.torch_available():  # looks for torch without importing it
        return hybrid_backend.INSTALL_HINT
    return None


def _changed_pins(old: Settings, new: Settings) -> dict[str, object]:
    pin_names = {f.name for f in fields(Pins)}
    return {
        f.name: getattr(new, f.name)
        for f in fields(Settings)
        if f.name in pin_names and getattr(old, f.name) != getattr(new, f.name)
    }


class MainWindow(QMainWindow):
    def __init__(self, initial_model: str | None = None, *, engine: EngineThread | None = None) -> None:
        super().__init__()
        # Worker threads (engine loop, sampler, pool tasks) run Python too; a shorter GIL switch
        # interval hands the GUI thread the interpreter sooner, so a busy worker cannot hold the
        # event loop for several 5 ms default slices in a row.
        sys.setswitchinterval(0.001)
        self.setWindowTitle("VRAM Pilot")
        self.setAcceptDrops(True)
        self.prefs = Prefs()
        self._conn = connect()
        self.store = ChatStore(conn=self._conn)
        self.library = Library(conn=self._conn)
        self.engine = engine or EngineThread(parent=self)

        self.machine: Machine | None = None
        self.target: Target | None = None
        self.target_key = TARGET_MACHINE
        self.model_path: Path | None = Path(initial_model).expanduser() if initial_model else None
        if self.model_path is not None:
            self.library.add_file(self.model_path)
        self.spec: ModelSpec | None = None
        self.pins = Pins()
        self.plan: Plan | None = None
        self._plan_seq = 0
        self.loaded: LoadResult | None = None
        self.chat_id: int | None = None
        self.generating = False
        self.editing: int | None = None
        self._pending_send = False  # generate once the model is loaded
        self._shut = False
        self._reload_pins: Pins | None = None
        # The open chat's backend, and its hybrid session (made on the first hybrid reply, kept while
        # the chat stays open, dropped with it: the torch weights are hundreds of MiB).
        self.chat_backend = BACKEND_LLAMA
        self.hybrid: HybridChat | None = None
        self._hybrid_missing = hybrid_unavailable()
        self._hybrid_support: dict[Path, str | None] = {}  # model file -> why the hybrid backend cannot run it

        self._build()
        self._wire_engine()
        self._restore()
        self.chat_view.set_empty_hint("Looking at this machine…")
        run_task(detect_machine, self._machine_ready, self._show_error, parent=self)

    # -- layout --------------------------------------------------------------------------------
    def _build(self) -> None:
        self.chat_list = ChatList()
        self.chat_view = ChatView()
        self.hardware = HardwareView()
        self.library_view = LibraryView()
        self.plan_view = PlanView()

        right = QWidget()
        rl = QVBoxLayout(right)
        hw_box = QGroupBox("This machine")
        QVBoxLayout(hw_box).addWidget(self.hardware)
        lib_box = QGroupBox("Models")
        QVBoxLayout(lib_box).addWidget(self.library_view)
        plan_box = QGroupBox("Plan")
        QVBoxLayout(plan_box).addWidget(self.plan_view)
        for box in (hw_box, lib_box, plan_box):
            box.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
            rl.addWidget(box)
        rl.addStretch(1)
        scroll = QScrollArea()
        scroll.setObjectName("right_panel")
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(right)

        # The hub is a tab beside the chat; the meters a tab beside the plan, with a compact
        # form in the status bar that stays visible whichever tab is open.
        self.hub = HubView(detect=False)
        self.center_tabs = QTabWidget()
        self.center_tabs.setObjectName("center_tabs")
        self.center_tabs.addTab(self.chat_view, "Chat")
        self.center_tabs.addTab(self.hub, "Hub")
        self.sampler = Sampler()
        self.meters_feed = MetersFeed(self.sampler, self)
        self.meters_panel = MetersPanel(self.meters_feed)
        self.meters_status = MetersStatusWidget(self.meters_feed)
        self.right_tabs = QTabWidget()
        self.right_tabs.setObjectName("right_tabs")
        self.right_tabs.addTab(scroll, "Plan")
        self.right_tabs.addTab(self.meters_panel, "Meters")

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.chat_list)
        self.splitter.addWidget(self.center_tabs)
        self.splitter.addWidget(self.right_tabs)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        em = self.fontMetrics().averageCharWidth()
        self.splitter.setSizes([32 * em, 90 * em, 70 * em])
        self.setCentralWidget(self.splitter)
        self.status = QLabel()
        self.status.setObjectName("status")
        self.statusBar().addWidget(self.status, 1)
        self.statusBar().addPermanentWidget(self.meters_status)
        self.meters_status.clicked.connect(lambda: self.right_tabs.setCurrentWidget(self.meters_panel))
        self.meters_panel.replan_requested.connect(self._replan_from_meters)
        self.hub.model_downloaded.connect(self._hub_downloaded)
        self.hub.status_changed.connect(self.set_status)

        # Documents: a strip above the chat input (attach, fit and Re-plan, prompt progress, context given).
        self.documents = DocumentsController(self.engine, parent=self)
        chat_layout = self.chat_view.layout()
        chat_layout.insertWidget(chat_layout.indexOf(self.chat_view.banner), self.documents.panel)  # type: ignore[attr-defined]
        self.documents.panel.attach_requested.connect(self._attach_documents)
        self.documents.replan_requested.connect(self._replan_for_documents)
        self.documents.status.connect(self.set_status)

        self.chat_list.chat_selected.connect(self.open_chat)
        self.chat_list.new_chat_requested.connect(self.new_chat)
        self.chat_list.rename_requested.connect(self._rename_chat)
        self.chat_list.delete_requested.connect(self._delete_chat)
        self.chat_list.export_requested.connect(self._export_chat)
        self.chat_list.search_changed.connect(lambda _t: self._refresh_chats())

        self.chat_view.send_requested.connect(self.send)
        self.chat_view.stop_requested.connect(self.stop)
        self.chat_view.regenerate_requested.connect(self.regenerate)
        self.chat_view.edit_requested.connect(self.begin_edit)
        self.chat_view.system_prompt_changed.connect(self._system_prompt_changed)
        self.chat_view.sampling_changed.connect(self.prefs.set_sampling)
        self.chat_view.enter_sends_changed.connect(self.prefs.set_enter_sends)
        self.chat_view.backend_changed.connect(self._backend_chosen)
        if self._hybrid_missing:
            # Listed but greyed: the user learns the backend exists and how to get it.
            self.chat_view.set_backend_available(BACKEND_HYBRID, False, self._hybrid_missing)

        self.library_view.model_selected.connect(self.select_model)
        self.library_view.open_files_requested.connect(self._open_files)
        self.library_view.add_folder_requested.connect(self._add_folder)
        self.library_view.remove_requested.connect(self._remove_model)

        self.plan_view.pins_changed.connect(self.set_pins)
        self.plan_view.alternative_chosen.connect(self.use_alternative)
        self.plan_view.target_changed.connect(self._target_changed)
        self.plan_view.load_requested.connect(self.load_model)
        self.plan_view.cancel_load_requested.connect(self.engine.cancel_load)
        self.plan_view.unload_requested.connect(self.engine.unload)
        self.plan_view.export_requested.connect(self.export_command)
        self.plan_view.set_can_load(False, "Planning…")

        self._build_menus()

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self._action(file_menu, "Open GGUF…", self._open_files, QKeySequence.StandardKey.Open)
        self._action(file_menu, "Add model folder…", self._add_folder)
        self._action(file_menu, "Attach documents…", self._attach_documents, name="action_attach_documents")
        file_menu.addSeparator()
        self._action(file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit)

        chat_menu = bar.addMenu("&Chat")
        self._action(chat_menu, "New chat", self.new_chat, QKeySequence("Ctrl+N"), name="action_new_chat")
        self._action(chat_menu, "Focus input", self.chat_view.focus_input, QKeySequence("Ctrl+L"), name="action_focus")
        self._action(chat_menu, "Stop generating", self.stop, QKeySequence(Qt.Key.Key_Escape), name="action_stop")
        self._action(chat_menu, "Regenerate", self.regenerate)
        chat_menu.addSeparator()
        self._action(chat_menu, "Export as Markdown…", lambda: self._export_current("markdown"))
        self._action(chat_menu, "Export as JSON…", lambda: self._export_current("json"))

        model_menu = bar.addMenu("&Model")
        self._action(model_menu, "Load", self.load_model)
        self._action(model_menu, "Unload", self.engine.unload)
        export = model_menu.addMenu("Copy llama-server command")
        for shell, label in SHELL_NAMES.items():
            self._action(
                export, f"for {label}", lambda _c=False, s=shell: self.export_command(s), name=f"menu_export_{shell}"
            )

        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "About VRAM Pilot", self._about)

    def _action(self, menu, text, slot, shortcut=None, name: str = "") -> QAction:  # type: ignore[no-untyped-def]
        act = menu.addAction(text)
        act.triggered.connect(lambda _checked=False: slot())
        if shortcut is not None:
            act.setShortcut(shortcut)
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            self.addAction(act)
        if name:
            act.setObjectName(name)
        return act

    def _restore(self) -> None:
        geometry = self.prefs.geometry()
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 900)
        splitter = self.prefs.splitter()
        if splitter is not None:
            self.splitter.restoreState(splitter)
        self.chat_view.sampling.set_params(self.prefs.sampling())
        self.chat_view.set_enter_sends(self.prefs.enter_sends())
        self.chat_view.set_system_prompt(self.prefs.default_system_prompt())
        self._refresh_chats()
        last = self.prefs.last_chat()
        if last is not None and last in self.chat_list.ids():
            self.open_chat(last)
        else:
            self.new_chat()

    # -- machine, targets, library -------------------------------------------------------------
    def _machine_ready(self, machine: Machine) -> None:
        self.machine = machine
        self.hardware.set_machine(machine)
        if not machine.gpus:
            self.set_status("No NVIDIA GPU found: planning for the CPU")
        self.prefs.set_seen_hardware()
        targets = [(TARGET_MACHINE, "This machine"), (TARGET_CPU, "CPU only")]
        try:
            targets += [(PROFILE_PREFIX + p.name, f"{p.name} (profile)") for p in load_profiles()]
        except Exception as exc:  # profiles are optional for the window; say why they are missing
            self.set_status(f"GPU profiles unavailable: {exc}")
        self.plan_view.set_targets(targets, self.target_key)
        self.target = self._make_target(self.target_key)
        self.hub.set_target(self.target)
        if self.model_path is None:
            last = self.prefs.last_model()
            self.model_path = last if last is not None and last.is_file() else embedded_model_path()
        self.refresh_library()
        if self.model_path is not None:
            self.select_model(self.model_path)
        else:
            self.chat_view.set_empty_hint("No model yet: open a GGUF file or drop one on the window.")

    def _make_target(self, key: str) -> Target:
        assert self.machine is not None
        if key == TARGET_CPU:
            return target_cpu_only(self.machine)
        if key.startswith(PROFILE_PREFIX):
            name = key[len(PROFILE_PREFIX) :]
            profile = next(p for p in load_profiles() if p.name == name)
            return target_from_profile(profile, self.machine)
        return target_from_machine(self.machine)

    def _target_changed(self, key: str) -> None:
        if self.machine is None:
            return
        self.target_key = key
        self.target = self._make_target(key)
        self.hub.set_target(self.target)
        self.replan()

    def refresh_library(self) -> None:
        if self.target is None:
            return
        target = self.target
        embedded = embedded_model_path()
        paths = self.library.files()
        folders = self.library.folders()

        def work() -> list[LibraryEntry]:
            seen: set[Path] = set()
            entries: list[LibraryEntry] = []
            candidates: list[tuple[Path, bool]] = []
            if embedded is not None and embedded.is_file():
                candidates.append((embedded, True))
            candidates += [(p, False) for p in paths if p.is_file()]
            for folder in folders:
                candidates += [(p, False) for p in scan_folder(folder)]
            for p, is_embedded in candidates:
                if p in seen:
                    continue
                seen.add(p)
                entries.append(describe_entry(p, target, embedded=is_embedded))
            return entries

        run_task(
            work, lambda entries: self.library_view.set_entries(entries, self.model_path), self._show_error, parent=self
        )

    def _open_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Open GGUF models", "", "GGUF models (*.gguf);;All files (*)")
        self.add_models([Path(f) for f in files])

    def add_models(self, paths: list[Path]) -> None:
        paths = [p for p in paths if p.suffix.lower() == ".gguf"]
        if not paths:
            return
        for p in paths:
            self.library.add_file(p)
        self.model_path = paths[0]
        self.refresh_library()
        self.select_model(paths[0])

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of GGUF models")
        if folder:
            self.library.add_folder(folder)
            self.refresh_library()

    def _remove_model(self, path: Path) -> None:
        self.library.remove_file(path)
        self.refresh_library()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        urls = event.mimeData().urls()
        if any(u.isLocalFile() and (u.toLocalFile().lower().endswith(".gguf") or is_supported(Path(u.toLocalFile())))
               for u in urls):  # fmt: skip
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        """GGUF files join the model library; anything else is attached to the chat as a document."""
        paths = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        self.add_models([p for p in paths if p.suffix.lower() == ".gguf"])
        docs = [p for p in paths if p.suffix.lower() != ".gguf"]
        if docs:
            self.documents.attach_files(docs)
        event.acceptProposedAction()

    def _attach_documents(self) -> None:
        patterns = " ".join(SUPPORTED_PATTERNS)
        files, _ = QFileDialog.getOpenFileNames(self, "Attach documents", "", f"Documents ({patterns});;All files (*)")
        if files:
            self.documents.attach_files([Path(f) for f in files])

    def _replan_for_documents(self, n_ctx: int) -> None:
        """The documents' one-click Re-plan: pin the context they need, let the planner choose the rest, reload."""
        self._replan_from_meters(replace(self.pins, n_ctx=n_ctx))

    # -- model and plan ------------------------------------------------------------------------
    def select_model(self, path: Path) -> None:
        path = Path(path)
        self.model_path = path
        self.prefs.set_last_model(path)
        self.pins = self.prefs.pins_for(path)
        self.library_view.select(path)
        self.plan_view.set_can_load(False, "Planning…")

        def done(spec: ModelSpec) -> None:
            if self.model_path != path:
                return
            self.spec = spec
            self.replan()
            if self.chat_backend == BACKEND_HYBRID:
                self._check_hybrid_support()
            if not self.chat_view.messages():
                self.chat_view.set_empty_hint(
                    f"{spec.name or path.name} is selected. Type a message below: the model loads with the "
                    "plan on the right (or press Load first)."
                )

        run_task(lambda: load_model_spec(path), done, self._show_error, parent=self)

    def set_pins(self, pins: Pins) -> None:
        self.pins = pins
        if self.model_path is not None:
            self.prefs.set_pins_for(self.model_path, pins)
        self.replan()

    def use_alternative(self, alt: Alternative) -> None:
        if self.plan is None:
            return
        self.set_pins(replace(self.pins, **_changed_pins(self.plan.settings, alt.settings)))  # type: ignore[arg-type]

    def replan(self) -> None:
        if self.spec is None or self.target is None:
            return
        self._plan_seq += 1
        seq, spec, target, pins = self._plan_seq, self.spec, self.target, self.pins

        def done(result: Plan) -> None:
            if seq == self._plan_seq:
                self._show_plan(result)

        run_task(lambda: plan(spec, target, pins, exact=True), done, self._show_error, parent=self)

    def _show_plan(self, p: Plan) -> None:
        self.plan = p
        self.plan_view.set_plan(p)
        self.documents.reply_tokens = self.chat_view.sampling.params().max_tokens
        self.documents.set_plan(p)
        self._update_load_state()

    def _update_load_state(self) -> None:
        if self.target_key != TARGET_MACHINE and self.target_key != TARGET_CPU:
            self.plan_view.set_can_load(False, "This plan is for a GPU this machine does not have: export it instead")
        else:
            self.plan_view.set_can_load(self.plan is not None and not self.engine.busy)
        if self.loaded is not None and self.engine.engine.loaded:
            lp = self.loaded.plan
            same = self.plan is not None and lp.spec.path == self.plan.spec.path and lp.settings == self.plan.settings
            text = f"Loaded: {lp.spec.path.name}, {format_tokens(lp.settings.n_ctx)} context"
            if not same:
                text += " — the plan above differs: press Load to apply it"
            self.plan_view.set_load_status(text, loaded=True)
            self.plan_view.load_button.setText("Reload" if same else "Load")
        else:
            self.plan_view.set_load_status("Not loaded", loaded=False)

    def _model_is_loaded(self) -> bool:
        return (
            self.loaded is not None
            and self.engine.engine.loaded
            and self.model_path is not None
            and self.loaded.plan.spec.path == self.model_path
        )

    # -- load ----------------------------------------------------------------------------------
    def confirm(self, title: str, text: str) -> bool:
        """Ask before something the user may not want (tests replace this)."""
        answer = QMessageBox.question(self, title, text, QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def load_model(self) -> bool:
        if self.plan is None or self.engine.busy or self.generating:
            return False
        if self.target_key not in (TARGET_MACHINE, TARGET_CPU):
            self.set_status("This plan is for another GPU; loading runs on this machine's plan")
            return False
        p = self.plan
        if not p.fits:
            why = p.refused or (p.reasons[-1] if p.reasons else "it does not fit")
            if not self.confirm(
                "Load a plan that does not fit?", f"{why}\n\nLoading may fail or be slow. Load anyway?"
            ):
                self._pending_send = False
                return False
        self.plan_view.set_loading(0.0)
        self.plan_view.set_can_load(False)
        self.set_status(f"Loading {p.spec.path.name}…")
        self.engine.load(p)
        return True

    def _wire_engine(self) -> None:
        e = self.engine
        e.load_progress.connect(lambda v: self.plan_view.set_loading(v))
        e.loaded.connect(self._loaded)
        e.load_failed.connect(self._load_failed)
        e.text.connect(self.chat_view.append_reply_text)
        e.replied.connect(self._replied)
        e.chat_failed.connect(self._chat_failed)
        e.unloaded.connect(self._unloaded)
        e.report.connect(self._engine_report)

    def _loaded(self, result: LoadResult) -> None:
        self.loaded = result
        self.meters_panel.set_plan(result.plan)
        self.plan_view.set_loading(None)
        msg = f"Loaded {result.plan.spec.path.name} in {result.load_s:.1f} s"
        self.documents.restore_state()
        if result.changes:
            msg = "llama.cpp could not allocate the plan; backed off: " + "; ".join(result.changes)
            self.chat_view.show_banner(msg, [("banner_ok", "OK", self.chat_view.hide_banner)])
            # Show what runs: pin what the back-off changed.
            self.set_pins(
                replace(
                    self.pins,
                    **_changed_pins(self.plan.settings if self.plan else result.plan.settings, result.plan.settings),
                )
            )  # type: ignore[arg-type]
        self.set_status(msg)
        self._update_load_state()
        if self._pending_send:
            self._pending_send = False
            self._generate_reply()

    def _load_failed(self, exc: BaseException, cancelled: bool) -> None:
        self.plan_view.set_loading(None)
        self._pending_send = False
        self.loaded = None
        text = "Loading cancelled" if cancelled else f"Could not load: {exc}"
        self.set_status(text)
        self.plan_view.set_load_status(text, loaded=False)
        self._update_load_state()

    def _unloaded(self) -> None:
        self.loaded = None
        self.meters_panel.set_plan(None)
        self.set_status("Model unloaded")
        self._update_load_state()

    # -- chats ---------------------------------------------------------------------------------
    def _refresh_chats(self) -> None:
        query = self.chat_list.search.text()
        chats = self.store.search(query) if query.strip() else self.store.list_chats()
        self.chat_list.set_chats(chats, self.chat_id)

    def new_chat(self) -> None:
        if self.generating:
            return
        self.chat_id = None
        self.editing = None
        self.prefs.set_last_chat(None)
        self.chat_view.clear_messages()
        self.chat_view.hide_banner()
        self.chat_view.set_title("New chat")
        self.chat_view.set_system_prompt(self.prefs.default_system_prompt())
        self.hybrid = None
        self._show_backend(BACKEND_LLAMA)
        self.documents.set_chat(None)
        self.chat_list.list.clearSelection()
        self.chat_list.list.setCurrentItem(None)  # type: ignore[arg-type]
        self.chat_view.focus_input()

    def open_chat(self, chat_id: int) -> None:
        if self.generating or chat_id == self.chat_id:
            return
        chat = self.store.get_chat(chat_id)
        self.chat_id = chat.id
        self.editing = None
        self.prefs.set_last_chat(chat.id)
        self.chat_view.clear_messages()
        self.chat_view.hide_banner()
        self.chat_view.set_title(chat.title)
        self.chat_view.set_system_prompt(chat.system_prompt)
        self.hybrid = None  # another chat's cache: this chat's first hybrid reply feeds it afresh
        self._show_backend(chat.backend)
        self.documents.set_chat(chat.id)
        for m in chat.messages:
            self.chat_view.add_message(m.position, m.role, m.content, self._summary(m.stats))
        self._refresh_chats()

    def _rename_chat(self, chat_id: int) -> None:
        current = self.store.get_chat(chat_id).title
        title, ok = QInputDialog.getText(self, "Rename chat", "Title", text=current)
        if ok:
            self.store.rename(chat_id, title)
            if chat_id == self.chat_id:
                self.chat_view.set_title(self.store.get_chat(chat_id).title)
            self._refresh_chats()

    def _delete_chat(self, chat_id: int) -> None:
        title = self.store.get_chat(chat_id).title
        if not self.confirm("Delete chat?", f"Delete “{title}” and all its messages?"):
            return
        self.store.delete(chat_id)
        self.documents.forget_chat(chat_id)
        if chat_id == self.chat_id:
            self.new_chat()
        self._refresh_chats()

    def _export_current(self, fmt: str) -> None:
        if self.chat_id is not None:
            self._export_chat(self.chat_id, fmt)

    def _export_chat(self, chat_id: int, fmt: str) -> None:
        title = self.store.get_chat(chat_id).title
        ext, filt = (".md", "Markdown (*.md)") if fmt == "markdown" else (".json", "JSON (*.json)")
        safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip() or "chat"
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", safe + ext, filt)
        if path:
            self.write_export(chat_id, fmt, Path(path))

    def write_export(self, chat_id: int, fmt: str, path: Path) -> None:
        if fmt == "markdown":
            path.write_text(self.store.export_markdown(chat_id), encoding="utf-8")
        else:
            path.write_text(json.dumps(self.store.export_json(chat_id), indent=2, ensure_ascii=False), encoding="utf-8")
        self.set_status(f"Exported to {path}")

    def _system_prompt_changed(self, text: str) -> None:
        self.prefs.set_default_system_prompt(text)
        if self.chat_id is not None:
            self.store.set_system_prompt(self.chat_id, text)
        self.chat_view.set_system_prompt(text)

    # -- conversation --------------------------------------------------------------------------
    def send(self, text: str) -> None:
        if self.generating or not text.strip():
            return
        if self.chat_id is None:
            chat = self.store.create_chat(
                model_path=str(self.model_path) if self.model_path else None,
                system_prompt=self.chat_view.system_prompt.toPlainText(),
                backend=self.chat_backend,
            )
            self.chat_id = chat.id
            self.prefs.set_last_chat(chat.id)
            self.documents.bind_chat(chat.id)
        stored = None
        if self.editing is not None:
            self._retitle_if_first_edited(self.chat_id, self.editing, text)
            self.store.truncate(self.chat_id, self.editing)
            self.editing = None
            self.chat_view.hide_banner()
            stored = self.store.add_message(self.chat_id, "user", text)
            self._reload_view_messages()
        else:
            stored = self.store.add_message(self.chat_id, "user", text)
            self.chat_view.add_message(stored.position, "user", text)
            if stored.position == 0:
                self.chat_view.set_title(self.store.get_chat(self.chat_id).title)
        self.chat_view.clear_input()
        self._refresh_chats()
        self._start_reply()

    def _retitle_if_first_edited(self, chat_id: int, position: int, text: str) -> None:
        """A title made from the first question follows its edit; one the user chose stays."""
        chat = self.store.get_chat(chat_id)
        first = next((m for m in chat.messages if m.role == "user"), None)
        if first is not None and first.position == position and chat.title == title_from(first.content):
            self.store.rename(chat_id, title_from(text))

    def _reload_view_messages(self) -> None:
        assert self.chat_id is not None
        chat = self.store.get_chat(self.chat_id)
        self.chat_view.clear_messages()
        self.chat_view.set_title(chat.title)
        for m in chat.messages:
            self.chat_view.add_message(m.position, m.role, m.content, self._summary(m.stats))

    def _start_reply(self) -> None:
        """Generate for the stored conversation (last message is the user's); load first if needed.

        A loaded model keeps answering when the user has since changed the plan: reloading drops
        the cache, so it happens only when they press Load.
        """
        if self._model_is_loaded():
            self._generate_reply()
            return
        self._pending_send = True
        self.chat_view.show_banner("Loading the model with the plan on the right…")
        if not self.load_model():
            self._pending_send = False
            self.chat_view.show_banner("Load a model to get a reply (the plan on the right shows what would load).")

    def conversation(self) -> list[Message]:
        assert self.chat_id is not None
        chat = self.store.get_chat(self.chat_id)
        msgs: list[Message] = []
        if chat.system_prompt.strip():
            msgs.append(Message("system", chat.system_prompt))
        msgs += [Message(m.role, m.content) for m in chat.messages]  # type: ignore[arg-type]
        return msgs

    def _generate_reply(self, *, trim: bool = False) -> None:
        if self.chat_id is None:
            return
        self.chat_view.hide_banner()
        messages = self.conversation()
        sampling: SamplingParams = self.chat_view.sampling.params()
        if self.documents.active and self.engine.engine.loaded:
            # The documents go into the prompt: whole, or the passages retrieved for this question.
            self.documents.reply_tokens = sampling.max_tokens
            system = messages[0].content if messages and messages[0].role == "system" else ""
            turns = [m for m in messages if m.role != "system"]
            messages = self.documents.compose(system, turns[:-1], turns[-1].content).messages
        position = len(self.store.messages(self.chat_id))
        self.generating = True
        self.chat_view.set_busy(True)
        self.chat_view.begin_reply(position)
        self.plan_view.set_can_load(False, "Generating…")
        if self.chat_backend == BACKEND_HYBRID:
            self._generate_hybrid(messages, sampling, trim=trim)
            return
        self.set_status("Generating…")
        self.engine.chat(messages, sampling, trim=trim)

    def _generate_hybrid(self, messages: Sequence[Message], sampling: SamplingParams, *, trim: bool) -> None:
        """The reply comes from the hybrid session, on the engine thread (which owns the tokenizer it
        uses); it streams, stops and is stored through the same signals as a llama.cpp reply."""
        assert self.model_path is not None and hybrid_backend is not None
        if self.hybrid is None or self.hybrid.model_path != self.model_path:
            threads = self.loaded.plan.settings.n_threads if self.loaded is not None else None
            self.hybrid = hybrid_backend.HybridChat(self.model_path, threads=threads)
        hybrid = self.hybrid
        self.set_status(
            "Generating with the hybrid cache (torch)…"
            if hybrid.prepared
            else "Reading the model into torch for the hybrid cache (first reply of this chat only)…"
        )
        messages = list(messages)

        def job(
            engine: Engine, on_text: Callable[[str], None], on_report: Callable[[object], None], cancel: threading.Event
        ) -> Reply:
            return hybrid.chat(
                engine, messages, sampling, on_text=on_text, on_usage=on_report, cancel=cancel, trim=trim
            )

        self.engine.run_chat(job)

    def _replied(self, reply: Reply) -> None:
        self.generating = False
        self.chat_view.set_busy(False)
        stats: dict[str, Any] = reply.stats.to_dict()
        kv = getattr(reply, "kv", None)  # a HybridReply's (vrampilot.hybrid may be absent: no isinstance)
        if isinstance(kv, KvCacheUsage):
            # Kept with the message, so the bytes are still there when the chat is reopened.
            stats["backend"] = BACKEND_HYBRID
            stats.update(kv.to_dict())
            if self.chat_backend == BACKEND_HYBRID:
                self._show_kv(kv)
        elif reply.stats.decode_tps > 0:
            # The meters compare this measured speed with the plan's prediction (spill detection);
            # the context matters, since a long chat is slower without anything having spilled.
            self.meters_panel.record_decode(
                reply.stats.decode_tps, context_tokens=reply.stats.context_used, duration_s=reply.stats.decode_s
            )
        if self.chat_id is not None and (reply.text or reply.stats.stop_reason != "cancelled"):
            stored = self.store.add_message(self.chat_id, "assistant", reply.text, stats)
            summary = self._summary(stats)
            if self.documents.active:
                # llama.cpp's saved cache says nothing about a hybrid reply: nothing to save.
                sources = self.documents.reply_done(stored.position - 1, reply.text, save_state=kv is None)
                summary += f" · {sources}" if sources else ""
            self.chat_view.finish_reply(reply.text, summary)
        else:
            self.chat_view.drop_reply()
        self.set_status(self._summary(stats))
        self._refresh_chats()
        self._update_load_state()

    def _chat_failed(self, exc: BaseException) -> None:
        self.generating = False
        self.chat_view.set_busy(False)
        self.chat_view.drop_reply()
        self._update_load_state()
        if isinstance(exc, ContextOverflow):
            needed = exc.prompt_tokens + exc.max_tokens
            bigger = 1 << math.ceil(math.log2(max(needed, 512)))
            actions: list[tuple[str, str, object]] = []
            if sum(1 for m in self.conversation() if m.role == "user") > 1:
                actions.append(("drop_oldest", "Drop oldest turns", lambda: self._generate_reply(trim=True)))
            if self.chat_backend != BACKEND_HYBRID:  # the hybrid backend's limit is the model's, not the plan's
                actions.append(
                    ("replan_bigger", f"Re-plan with {format_tokens(bigger)} context", lambda: self._replan_context(bigger))
                )
            actions.append(("overflow_cancel", "Cancel", self.chat_view.hide_banner))
            self.chat_view.show_banner(f"This conversation would overflow the context: {exc}.", actions)
            self.set_status("Context would overflow: nothing was sent")
        else:
            self.chat_view.show_banner(f"No reply: {exc}", [("banner_ok", "OK", self.chat_view.hide_banner)])
            self.set_status(f"No reply: {exc}")

    def _replan_context(self, n_ctx: int) -> None:
        self.chat_view.hide_banner()
        self.set_pins(replace(self.pins, n_ctx=n_ctx))
        self._pending_send = True
        # Load as soon as the new plan is shown.
        QTimer.singleShot(0, self._load_when_planned)

    def _replan_from_meters(self, pins: Pins) -> None:
        """The meters' one-click fix for a spill: re-plan with its pins and reload."""
        self.set_pins(pins)
        self._reload_pins = pins
        QTimer.singleShot(0, self._reload_when_planned)

    def _reload_when_planned(self) -> None:
        wanted = self._reload_pins
        if self.plan is not None and self.plan.pins == wanted:
            self.load_model()
        else:
            QTimer.singleShot(20, self._reload_when_planned)

    def _hub_downloaded(self, path: str) -> None:
        model = Path(path)
        self.add_models([model])  # also selects it and plans it
        self.center_tabs.setCurrentWidget(self.chat_view)
        self.set_status(f"Downloaded and verified {model.name}")

    def _load_when_planned(self) -> None:
        if self.plan is not None and self.plan.settings.n_ctx == self.pins.n_ctx:
            if not self.load_model():
                self._pending_send = False
        else:
            QTimer.singleShot(20, self._load_when_planned)

    def stop(self) -> None:
        if self.generating:
            self.engine.stop()
        elif self.engine.busy:
            self.engine.cancel_load()

    def regenerate(self) -> None:
        if self.generating or self.chat_id is None:
            return
        msgs = self.store.messages(self.chat_id)
        if not msgs or msgs[-1].role != "assistant":
            return
        self.store.truncate(self.chat_id, msgs[-1].position)
        self._reload_view_messages()
        self._start_reply()

    def begin_edit(self, position: int) -> None:
        if self.generating or self.chat_id is None:
            return
        msgs = {m.position: m for m in self.store.messages(self.chat_id)}
        if position not in msgs:
            return
        self.editing = position
        self.chat_view.input.setPlainText(msgs[position].content)
        self.chat_view.focus_input()

        def cancel_edit() -> None:
            self.editing = None
            self.chat_view.clear_input()
            self.chat_view.hide_banner()

        self.chat_view.show_banner(
            "Editing an earlier message: sending replaces it and everything after it.",
            [("cancel_edit", "Cancel edit", cancel_edit)],
        )

    # -- backend -------------------------------------------------------------------------------
    def _summary(self, stats: dict[str, Any] | None) -> str:
        """The line under a reply: the engine's stats, and the hybrid cache's bytes when it made it."""
        if not stats:
            return ""
        text = format_summary(stats)
        kv = KvCacheUsage.from_stats(stats)
        if kv is not None:
            text += f" · hybrid cache (torch), {kv.short_text()}"
        return text

    def _show_backend(self, backend: str) -> None:
        """Show `backend` as the open chat's: the selector, the note and the KV meter. Stores nothing."""
        if backend == BACKEND_HYBRID and (self._hybrid_missing or hybrid_backend is None):
            self.chat_backend = BACKEND_LLAMA
            self.chat_view.set_backend(BACKEND_LLAMA)
            self.chat_view.set_backend_note(
                f"This chat was on the hybrid backend; it replies with llama.cpp until that is available. "
                f"{self._hybrid_missing}."
            )
            self._show_kv(None)
            return
        self.chat_backend = backend
        self.chat_view.set_backend(backend)
        if backend == BACKEND_HYBRID:
            self.chat_view.set_backend_note(hybrid_backend.about_text())
            self._show_kv(self.hybrid.usage() if self.hybrid is not None else KvCacheUsage(0, 0, 0))
            self._check_hybrid_support()
        else:
            self.chat_view.set_backend_note("")
            self._show_kv(None)

    def _backend_chosen(self, backend: str) -> None:
        """The user picked a backend for the open chat: stored with it (a new chat takes it when saved)."""
        if self.generating:
            self.chat_view.set_backend(self.chat_backend)
            return
        if self.chat_id is not None:
            self.store.set_backend(self.chat_id, backend)
            self._refresh_chats()
        if backend != BACKEND_HYBRID:
            self.hybrid = None
        self._show_backend(backend)
        label = "the experimental hybrid cache (torch)" if backend == BACKEND_HYBRID else "llama.cpp"
        self.set_status(f"This chat replies with {label}")

    def _check_hybrid_support(self) -> None:
        """Can the hybrid backend run the selected model? Answered off the GUI thread (imports torch)."""
        path = self.model_path
        if path is None or hybrid_backend is None:
            return
        if path in self._hybrid_support:
            self._hybrid_checked(path, self._hybrid_support[path])
            return

        def done(reason: str | None) -> None:
            self._hybrid_support[path] = reason
            self._hybrid_checked(path, reason)

        run_task(lambda: hybrid_backend.unsupported_reason(path), done, self._show_error, parent=self)

    def _hybrid_checked(self, path: Path, reason: str | None) -> None:
        if reason is None or path != self.model_path or self.chat_backend != BACKEND_HYBRID:
            return
        # Not for this model: the chat keeps llama.cpp, and the note says why.
        if self.chat_id is not None:
            self.store.set_backend(self.chat_id, BACKEND_LLAMA)
        self.hybrid = None
        self.chat_backend = BACKEND_LLAMA
        self.chat_view.set_backend(BACKEND_LLAMA)
        self._show_kv(None)
        self.chat_view.set_backend_note(f"The hybrid backend cannot run this model: {reason}. This chat stays on llama.cpp.")
        self.set_status(f"Hybrid backend: {reason}")

    def _engine_report(self, item: object) -> None:
        if isinstance(item, KvCacheUsage) and self.chat_backend == BACKEND_HYBRID:
            self._show_kv(item)
            if self.generating:
                self.set_status("Generating with the hybrid cache (torch)…")

    def _show_kv(self, usage: KvCacheUsage | None) -> None:
        self.meters_panel.set_kv_usage(usage)
        self.meters_status.set_kv_usage(usage)

    # -- export --------------------------------------------------------------------------------
    def export_command(self, shell: str) -> str:
        if self.plan is None:
            return ""
        text = quote(llama_server_argv(self.plan.spec.path, self.plan.settings), shell)
        QGuiApplication.clipboard().setText(text)
        note = "" if self.plan.fits else " (this plan does not fit: it may fail to load)"
        self.set_status(f"Copied the llama-server command for {SHELL_NAMES[shell]}{note}")
        return text

    # -- misc ----------------------------------------------------------------------------------
    def set_status(self, text: str) -> None:
        self.status.setText(text)

    def _show_error(self, exc: BaseException) -> None:
        self.set_status(f"Error: {exc}")

    def _about(self) -> None:
        from vrampilot import __version__

        QMessageBox.about(
            self,
            "About VRAM Pilot",
            f"VRAM Pilot {__version__}\nPlans llama.cpp settings so a GGUF model fits, explains them, and runs them.",
        )

    def closeEvent(self, event: QCloseEvent) -> None:
        self.prefs.set_geometry(self.saveGeometry(), self.splitter.saveState())
        self.prefs.sync()
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        self.hub.shutdown()
        self.meters_feed.stop()
        self.sampler.close()
        self.documents.shutdown()
        self.engine.shutdown()
        self._conn.close()
