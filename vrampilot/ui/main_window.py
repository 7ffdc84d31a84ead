"""The main window: chats on the left, the conversation in the middle, machine, models and plan on
the right. It lays out the views, owns dialogs and drag-drop, and wires the controllers of different
features to each other (each feature's controller wires its own views); the controllers hold the
state. Its menus are the table in menus.window_menus."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QGroupBox,
    QMainWindow,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from vrampilot.documents import is_supported
from vrampilot.log import describe_error
from vrampilot.storage import IMAGE_FILE_SUFFIXES
from vrampilot.ui import dialogs
from vrampilot.ui.agents.approval import GuiApprover
from vrampilot.ui.agents.controller import AgentsController
from vrampilot.ui.agents.mcp_panel import McpPanel
from vrampilot.ui.agents.tools_budget import ToolsBudget
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.chat.chat_list import ChatList
from vrampilot.ui.chat.controller import ChatController, ChatState
from vrampilot.ui.chat.documents_controller import DocumentsController
from vrampilot.ui.chat.view import ChatView
from vrampilot.ui.columns import Columns
from vrampilot.ui.hub.view import HubView
from vrampilot.ui.library.controller import LibraryController
from vrampilot.ui.library.view import LibraryView
from vrampilot.ui.log_window import LogWindow
from vrampilot.ui.menus import window_menus
from vrampilot.ui.meters.panel import MetersPanel, MetersStatusWidget
from vrampilot.ui.plan.controller import PlanController
from vrampilot.ui.plan.hardware_view import HardwareView
from vrampilot.ui.plan.view import PlanView
from vrampilot.ui.server.controller import ServerController
from vrampilot.ui.server.view import ServerPanel
from vrampilot.ui.services import Services
from vrampilot.ui.status_line import StatusLine
from vrampilot.ui.theme import ThemeChoice, apply_theme
from vrampilot.ui.wheel_guard import guard_wheel


class MainWindow(QMainWindow):
    def __init__(self, ctx: AppContext, services: Services, initial_model: str | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.services = services  # built by the composition root
        self.sampler, self.meters_feed = services.sampler, services.meters
        self.setWindowTitle("VRAM Pilot")
        self.setAcceptDrops(True)
        self._shut = False
        self.actions_by_name: dict[str, QAction] = {}  # the menus' named actions, once built
        self.agents = AgentsController(parent=self)  # the MCP servers of mcp.json (vrampilot.agents)
        self.approver = GuiApprover(self)
        self._build()
        # Through a lambda, so that replacing `confirm` (tests) reaches the controllers too.
        ask = lambda title, text: self.confirm(title, text)  # noqa: E731
        self.library = LibraryController(ctx, self.library_view, parent=self)
        self.plans = PlanController(
            ctx, services.speed, self.plan_view, self.library, self.hardware, confirm=ask, parent=self
        )
        self.documents = DocumentsController(ctx, parent=self)
        self.chats = ChatController(
            ctx,
            self.chat_view,
            self.chat_list,
            self.plans,
            self.documents,
            confirm=ask,
            agents=self.agents,
            approver=self.approver,
            parent=self,
        )
        self.server = ServerController(ctx, self.server_panel, self.plans, self.sampler, confirm=ask, parent=self)
        self.tools_budget = ToolsBudget(ctx, self.agents, self.plans, parent=self)  # the tools' tokens in the plan
        self.mcp_panel.set_budget(self.tools_budget)  # each tool's tokens in the MCP servers tab
        self._wire()
        self.actions_by_name = window_menus(self)
        self.columns.set_action(self.actions_by_name["action_chat_list"])
        self.set_theme(ctx.prefs.theme())
        self._restore()
        self.chat_view.set_empty_hint("Looking at this machine…")
        self.plans.start(Path(initial_model).expanduser() if initial_model else None)
        self.agents.start()  # the servers start while the model is planned

    # -- layout --------------------------------------------------------------------------------
    def _build(self) -> None:
        self.chat_list = ChatList()
        self.chat_view = ChatView()
        self.hardware = HardwareView()
        self.library_view = LibraryView()
        self.plan_view = PlanView()
        right = QWidget()
        rl = QVBoxLayout(right)
        for title, view in (("This machine", self.hardware), ("Models", self.library_view), ("Plan", self.plan_view)):
            box = QGroupBox(title)
            QVBoxLayout(box).addWidget(view)
            box.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
            rl.addWidget(box)
        rl.addStretch(1)
        self.right_scroll = QScrollArea()
        self.right_scroll.setObjectName("right_panel")
        self.right_scroll.setWidgetResizable(True)
        self.right_scroll.setWidget(right)
        # The column's minimum follows the panel's content, which wraps and narrows to fit a
        # 320-pixel column, down to what the narrowest window leaves (Columns.fit_panel_width).
        right.installEventFilter(self)
        guard_wheel(self.plan_view)
        # The hub is a tab beside the chat; the meters a tab beside the plan, with a compact form in
        # the status bar that stays visible whichever tab is open.
        self.hub = HubView(self.services.hub)
        self.center_tabs = QTabWidget()
        self.center_tabs.setObjectName("center_tabs")
        self.center_tabs.addTab(self.chat_view, "Chat")
        self.center_tabs.addTab(self.hub, "Hub")
        self.meters_panel = MetersPanel(self.meters_feed)
        self.meters_status = MetersStatusWidget(self.meters_feed)
        self.right_tabs = QTabWidget()
        self.right_tabs.setObjectName("right_tabs")
        self.right_tabs.addTab(self.right_scroll, "Plan")
        self.right_tabs.addTab(self.meters_panel, "Meters")
        self.server_panel = ServerPanel()
        self.right_tabs.addTab(self.server_panel, "Server")
        self.mcp_panel = McpPanel(self.agents)
        self.mcp_panel.setObjectName("mcp_panel")
        self.right_tabs.addTab(self.mcp_panel, "MCP servers")
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        for i, w in enumerate((self.chat_list, self.center_tabs, self.right_tabs)):
            self.splitter.addWidget(w)
            self.splitter.setStretchFactor(i, 1 if i == 1 else 0)
        # The chat list may collapse (a narrow window does it, see resizeEvent); chat and plan stay.
        self.splitter.setCollapsible(1, False)
        self.splitter.setCollapsible(2, False)
        em = self.fontMetrics().averageCharWidth()
        self.splitter.setSizes([32 * em, 90 * em, 70 * em])
        self.setCentralWidget(self.splitter)
        self.columns = Columns(
            self, self.splitter, self.chat_list, self.center_tabs, self.right_tabs, self.right_scroll
        )
        self.status = StatusLine()
        self.status.setObjectName("status")
        self.statusBar().addWidget(self.status, 1)
        self.statusBar().addPermanentWidget(self.meters_status)

    def _wire(self) -> None:
        """What one feature tells another (the chat, plan, library and documents wire their own views)."""
        plans, chats, hub = self.plans, self.chats, self.services.hub
        sources = (
            plans.status,  # the library's too
            chats.status,
            self.documents.status,
            self.hub.status_changed,
            self.server.status,
            self.agents.status,
        )
        for source in sources:
            source.connect(self.set_status)
        self.ctx.tasks.unhandled_error.connect(lambda exc: self.set_status(describe_error(exc)))
        plans.plan_shown.connect(lambda p: hub.set_target(p.target))
        self.chat_view.tools_toggled.connect(self.tools_budget.set_on)
        self.tools_budget.set_on(self.chat_view.tool_settings().on)
        plans.loaded.connect(lambda result: self.meters_panel.set_plan(result.plan))
        plans.unloaded.connect(lambda: self.meters_panel.set_plan(None))
        self.server.backend_changed.connect(chats.set_served)
        chats.kv_usage.connect(self.meters_panel.set_kv_usage)
        chats.kv_usage.connect(self.meters_status.set_kv_usage)
        chats.reply_measured.connect(self.meters_panel.record_reply)
        chats.state_changed.connect(self._chat_state)
        self.meters_status.clicked.connect(lambda: self.right_tabs.setCurrentWidget(self.meters_panel))
        self.meters_panel.replan_requested.connect(plans.replan_and_load)
        self.chat_view.attach_requested.connect(self.attach_files)
        hub.model_downloaded.connect(self._hub_downloaded)
        hub.projector_downloaded.connect(
            lambda path: self.set_status(f"Downloaded and verified the vision projector {Path(path).name}")
        )
        self.chat_list.rename_requested.connect(self.rename_chat)
        self.chat_list.export_requested.connect(self.export_chat)
        self.library_view.open_files_requested.connect(self.open_files)
        self.library_view.add_folder_requested.connect(self.add_folder)
        self.plan_view.export_requested.connect(self.export_command)

    def _restore(self) -> None:
        geometry, splitter = self.ctx.prefs.geometry(), self.ctx.prefs.splitter()
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 900)
        if splitter is not None:
            self.splitter.restoreState(splitter)
        self.chats.restore()

    # -- what the controllers report -----------------------------------------------------------
    def _chat_state(self, state: ChatState) -> None:
        # What cannot be done while a reply streams or a question waits for the model.
        for name in (
            "action_new_chat",
            "action_regenerate",
            "action_answer",
            "action_delete",
            "action_load",
            "action_unload",
        ):
            self.actions_by_name[name].setEnabled(state is ChatState.IDLE)

    def _hub_downloaded(self, path: str) -> None:
        self.library.add_models([Path(path)])
        self.center_tabs.setCurrentWidget(self.chat_view)
        self.set_status(f"Downloaded and verified {Path(path).name}")

    # -- dialogs, drag and drop ----------------------------------------------------------------
    def confirm(self, title: str, text: str) -> bool:
        """Ask before something the user may not want (tests replace this)."""
        return dialogs.confirm(self, title, text)

    def open_files(self) -> None:
        self.library.add_models(dialogs.gguf_files(self))

    def add_folder(self) -> None:
        if (folder := dialogs.model_folder(self)) is not None:
            self.library.add_folder(folder)

    def attach_files(self) -> None:
        """The chat's one Attach button (and the File menu): documents and images together."""
        self.chats.attach_files(dialogs.attachments(self))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        urls = event.mimeData().urls()
        if any(
            u.isLocalFile()
            and (
                u.toLocalFile().lower().endswith((".gguf", *IMAGE_FILE_SUFFIXES)) or is_supported(Path(u.toLocalFile()))
            )
            for u in urls
        ):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        """GGUF files join the model library; images wait to be sent with the next message; anything
        else is attached to the chat as a document."""
        paths = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        self.library.add_models([p for p in paths if p.suffix.lower() == ".gguf"])
        self.chats.attach_files([p for p in paths if p.suffix.lower() != ".gguf"])
        event.acceptProposedAction()

    def with_chat(self, fn: Callable[[int], object]) -> None:
        if self.chats.chat_id is not None:
            fn(self.chats.chat_id)

    def rename_chat(self, chat_id: int) -> None:
        if (title := dialogs.chat_title(self, self.ctx.conversations.chat(chat_id).title)) is not None:
            self.chats.rename(chat_id, title)

    def export_chat(self, chat_id: int, fmt: str) -> None:
        if (path := dialogs.export_path(self, self.ctx.conversations.chat(chat_id).title, fmt)) is not None:
            self.write_export(chat_id, fmt, path)

    def write_export(self, chat_id: int, fmt: str, path: Path) -> None:
        self.chats.export(chat_id, fmt, path)

    def export_command(self, shell: str) -> str:
        return self.plans.copy_command(shell)

    def show_log(self) -> LogWindow:
        dialog = LogWindow(self.ctx.log_path, self)
        dialog.show()
        return dialog

    def set_theme(self, choice: ThemeChoice) -> None:
        """View > Theme: System (follow it), Light or Dark, kept for the next start."""
        self.ctx.prefs.set_theme(choice)
        self.actions_by_name[f"theme_{choice}"].setChecked(True)
        apply_theme(cast(QApplication, QApplication.instance()), choice)  # Qt types it as QCoreApplication

    def set_status(self, text: str) -> None:
        self.status.set_line(text)

    def raise_window(self) -> None:
        """A second start of the app asked for this window."""
        self.showNormal()
        self.raise_()
        self.activateWindow()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest and watched is self.right_scroll.widget():
            self.columns.fit_panel_width()
        return super().eventFilter(watched, event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.columns.window_resized()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.ctx.prefs.set_geometry(self.saveGeometry(), self.splitter.saveState())
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        # A plan, fit or reply still on its way must not reach a window whose databases are closing.
        self.plans.shutdown()
        self.approver.shutdown()  # a reply waiting on the approval dialog is denied, not left waiting
        self.chats.blockSignals(True)
        self.hub.shutdown()
        self.server.shutdown()
        self.meters_feed.stop()
        self.sampler.close()
        self.documents.shutdown()
        self.agents.shutdown()
        self.ctx.engine.shutdown()  # the model is freed with the window; the context's owner closes the rest
