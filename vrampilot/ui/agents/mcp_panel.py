"""The "MCP servers" tab: the servers of mcp.json with their state and last error, each one's tools
with the ones the model may call ticked, what each tool and server costs in every prompt in the
model's tokens (ToolsBudget counts them off the GUI thread), the tools that run without asking
with a way to revoke that, and the config edited entry by entry or as raw JSON. The servers, the
config and its checks live in AgentsController; this view shows them and passes the user's
changes on. A change that the config's check refuses is one line under the editor, nothing saved.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vrampilot.agents import McpConfigError, ServerStatus, State
from vrampilot.agents.costs import ToolCosts
from vrampilot.planner.context_budget import TOOLS_SHARE_WARN
from vrampilot.ui.agents.controller import AgentsController
from vrampilot.ui.agents.tools_budget import ToolsBudget
from vrampilot.ui.agents.transcript import plain_label
from vrampilot.ui.theme import OK_GREEN, OVER_BUDGET, WARN_AMBER
from vrampilot.units import format_count, format_tokens

STATE_COLORS = {State.READY: OK_GREEN, State.STARTING: WARN_AMBER, State.FAILED: OVER_BUDGET}
NAME_ROLE = Qt.ItemDataRole.UserRole  # (server, tool or None) of a row
NEW_ENTRY = '{\n  "command": "npx",\n  "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]\n}\n'


ALWAYS = "always allowed"  # the user's "Always allow this tool": its calls run without asking


def tokens_text(n: int, costs: ToolCosts, *, allowed: bool = True) -> str:
    """A cost in the Tokens column: `~` marks an estimate; a tool not offered shows what ticking it adds."""
    text = f"{'~' if costs.estimate else ''}{format_count(n)}"
    # A template that shows no tools: nothing is added either way.
    return text if allowed or not costs.described else f"+{text} if ticked"


def costs_text(costs: ToolCosts | None, model: str | None, n_ctx: int | None) -> str:
    """The line under the list: what the allowed tools take of every prompt and of the plan's context."""
    if costs is None:
        return "What the tools cost in every prompt shows here once a server lists them."
    if not costs.estimate and not costs.described:
        return (
            f"{model}'s chat template does not show tools to the model: they take no tokens, and the model "
            "never calls one (docs/agents.md, Models that can call tools)."
        )
    amount = f"about {format_count(costs.total_tokens)}" if costs.estimate else format_count(costs.total_tokens)
    text = f"The allowed tools take {amount} tokens of every prompt"
    if n_ctx:
        text += f": {100 * costs.share_of(n_ctx):.0f}% of the plan's {format_tokens(n_ctx)}-token context"
    if costs.estimate:
        return f"{text} (an estimate from the schemas' characters: {costs.estimate})."
    return f"{text} (counted with {model}'s chat template and tokenizer)."


def state_text(s: ServerStatus) -> str:
    n = sum(1 for t in s.tools if t.allowed)
    if s.state is State.READY:
        return f"ready · {n} of {len(s.tools)} tools allowed"
    if s.state is State.FAILED:
        retry = f" (trying again in {s.retry_in_s:g} s)" if s.retry_in_s else ""
        return f"failed{retry}"
    return {State.STARTING: "starting…", State.STOPPED: "not running", State.DISABLED: "off"}[s.state]


def _button(name: str, text: str, slot: Callable[[], object], row: QHBoxLayout) -> QPushButton:
    b = QPushButton(text)
    b.setObjectName(name)
    b.clicked.connect(lambda _c=False: slot())
    row.addWidget(b)
    return b


def mono(edit: QPlainTextEdit) -> QPlainTextEdit:
    edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    return edit


class ServerDialog(QDialog):
    """Add or edit one server: its name and its entry, as JSON pasted from another host's mcp.json."""

    def __init__(
        self, controller: AgentsController, old_name: str | None, entry_text: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.controller, self.old_name = controller, old_name
        self.setObjectName("server_dialog")
        self.setWindowTitle("Edit MCP server" if old_name else "Add MCP server")
        lay = QVBoxLayout(self)
        lay.addWidget(
            plain_label(
                'The entry as Claude Desktop, Cursor, LM Studio or Jan write it: {"command", "args", "env", '
                '"cwd"} for a program, or {"url", "headers"} for a streamable HTTP server.'
            )
        )
        row = QHBoxLayout()
        row.addWidget(QLabel("Name"))
        self.name = QLineEdit(old_name or "")
        self.name.setObjectName("server_name")
        row.addWidget(self.name, 1)
        lay.addLayout(row)
        self.entry = mono(QPlainTextEdit(entry_text))
        self.entry.setObjectName("server_entry")
        lay.addWidget(self.entry, 1)
        self.error = plain_label("", "server_error")
        self.error.setStyleSheet(f"color: {OVER_BUDGET};")
        self.error.hide()
        lay.addWidget(self.error)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.save = QPushButton("Save")
        self.save.setObjectName("server_save")
        self.save.clicked.connect(self._save)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.reject)
        buttons.addWidget(self.save)
        buttons.addWidget(cancel)
        lay.addLayout(buttons)
        self.resize(560, 360)

    def _save(self) -> None:
        try:
            self.controller.put_server(self.name.text(), self.entry.toPlainText(), self.old_name)
        except McpConfigError as exc:
            self.error.setText(str(exc))
            self.error.show()
            return
        self.accept()


class McpPanel(QWidget):
    def __init__(self, controller: AgentsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.budget: ToolsBudget | None = None  # the tokens' counter (set_budget), built after the view
        self.dialog: ServerDialog | None = None  # the add/edit dialog while open
        lay = QVBoxLayout(self)
        intro = plain_label(
            "Tools for the chat (turn on \u201cUse tools\u201d there), from the MCP servers in mcp.json. "
            "Every call is asked before it runs. Untick a tool to keep it from the model."
        )
        lay.addWidget(intro)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("mcp_tabs")
        lay.addWidget(self.tabs, 1)

        servers = QWidget()
        sl = QVBoxLayout(servers)
        sl.setContentsMargins(0, 4, 0, 0)
        self.tree = QTreeWidget()
        self.tree.setObjectName("mcp_servers")
        self.tree.setColumnCount(3)
        self.tree.setHeaderLabels(["Server / tool", "Status", "Tokens"])
        self.tree.headerItem().setToolTip(
            2,
            "What each tool and server adds to every prompt while allowed (or would add, ticked), in the "
            "model's tokens: unticking it gives that much back to the conversation",
        )
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(True)
        header = self.tree.header()
        header.setStretchLastSection(False)
        # The names take what the state and size leave; a long error is cut here and whole below.
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.itemChanged.connect(self._item_changed)
        self.tree.currentItemChanged.connect(lambda *_a: self._show_details())
        sl.addWidget(self.tree, 1)
        self.costs = plain_label("", "mcp_costs")
        sl.addWidget(self.costs)
        self.details = plain_label("", "mcp_details")
        sl.addWidget(self.details)
        buttons = QHBoxLayout()
        self.add_button = _button("mcp_add", "Add…", self.add_server, buttons)
        self.edit_button = _button("mcp_edit", "Edit…", self.edit_server, buttons)
        self.remove_button = _button("mcp_remove", "Remove", self.remove_server, buttons)
        self.restart_button = _button("mcp_restart", "Restart", self.restart_server, buttons)
        self.restart_button.setToolTip(
            "Start the selected server again now (after a failure, or after it was given up)"
        )
        self.ask_again_button = _button("mcp_ask_again", "Ask again", self.ask_again, buttons)
        self.ask_again_button.setToolTip(
            "Take back “Always allow this tool”: the selected tool's calls (or every tool's of the "
            "selected server) are asked again before they run"
        )
        buttons.addStretch(1)
        sl.addLayout(buttons)
        self.tabs.addTab(servers, "Servers")

        raw = QWidget()
        rl = QVBoxLayout(raw)
        rl.setContentsMargins(0, 4, 0, 0)
        self.path_label = plain_label(str(controller.path), "mcp_path")
        self.path_label.setEnabled(False)
        rl.addWidget(self.path_label)
        self.raw = mono(QPlainTextEdit())
        self.raw.setObjectName("mcp_raw")
        rl.addWidget(self.raw, 1)
        self.raw_error = plain_label("", "mcp_raw_error")
        self.raw_error.setStyleSheet(f"color: {OVER_BUDGET};")
        self.raw_error.hide()
        rl.addWidget(self.raw_error)
        rb = QHBoxLayout()
        self.raw_save = QPushButton("Check and save")
        self.raw_save.setObjectName("mcp_raw_save")
        self.raw_save.clicked.connect(self.save_raw)
        self.raw_revert = QPushButton("Revert")
        self.raw_revert.setObjectName("mcp_raw_revert")
        self.raw_revert.clicked.connect(self.load_raw)
        rb.addWidget(self.raw_save)
        rb.addWidget(self.raw_revert)
        rb.addStretch(1)
        rl.addLayout(rb)
        self.tabs.addTab(raw, "mcp.json")

        # Queued: a tick's own itemChanged saves the config, and rebuilding the tree inside that
        # signal would delete the item that is emitting it.
        controller.servers_changed.connect(self.refresh, Qt.ConnectionType.QueuedConnection)
        self.refresh()
        self.load_raw()
        if controller.load_error:
            self.show_raw_error(controller.load_error)

    # -- the list ------------------------------------------------------------------------------
    def refresh(self) -> None:
        current = self.selected()
        self.tree.blockSignals(True)
        try:
            expanded = {item.text(0) for item in self.server_items() if item.isExpanded()}
            self.tree.clear()
            for s in self.controller.statuses():
                item = QTreeWidgetItem([s.name, state_text(s), ""])
                item.setData(0, NAME_ROLE, (s.name, None))
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(0, Qt.CheckState.Unchecked if s.state is State.DISABLED else Qt.CheckState.Checked)
                item.setToolTip(0, f"{s.transport}: {s.target}\nTick to run this server")
                if s.state in STATE_COLORS:
                    item.setForeground(1, QBrush(QColor(STATE_COLORS[s.state])))
                item.setToolTip(1, s.last_error or state_text(s))
                self.tree.addTopLevelItem(item)
                if s.last_error and s.state is not State.READY:
                    err = QTreeWidgetItem([f"Last error: {s.last_error}", "", ""])
                    err.setData(0, NAME_ROLE, (s.name, None))
                    err.setFirstColumnSpanned(True)
                    err.setForeground(0, QBrush(QColor(OVER_BUDGET)))
                    err.setToolTip(0, s.last_error)
                    item.addChild(err)
                always = set(self.controller.always_allowed(s.name))
                for t in s.tools:
                    status = (ALWAYS if t.name in always else "allowed") if t.allowed else "not offered"
                    child = QTreeWidgetItem([t.name, status, ""])
                    child.setData(0, NAME_ROLE, (s.name, t.name))
                    child.setFlags(child.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    child.setCheckState(0, Qt.CheckState.Checked if t.allowed else Qt.CheckState.Unchecked)
                    child.setToolTip(0, t.description or t.name)
                    if t.name in always:
                        child.setToolTip(
                            1, "Runs without asking (you chose “Always allow this tool”): Ask again takes it back"
                        )
                    item.addChild(child)
                item.setExpanded(s.name in expanded or bool(s.tools) or bool(s.last_error))
                if current is not None and current[0] == s.name:
                    keep = item if current[1] is None else self.tool_item(s.name, current[1])
                    if keep is not None:
                        self.tree.setCurrentItem(keep)
        finally:
            self.tree.blockSignals(False)
        self.show_costs()
        self._show_details()

    def set_budget(self, budget: ToolsBudget) -> None:
        self.budget = budget
        budget.costs_changed.connect(self.show_costs)
        self.show_costs()

    def show_costs(self) -> None:
        """The Tokens column and the line under the list, from the budget's latest count."""
        costs = self.budget.costs if self.budget is not None else None
        model = self.budget.model_name() if self.budget is not None else None
        n_ctx = self.budget.n_ctx() if self.budget is not None else None
        for item in self.server_items():
            server = item.text(0)
            n = costs.server_tokens.get(server) if costs is not None else None
            item.setText(2, tokens_text(n, costs) if costs is not None and n is not None else "")
            for i in range(item.childCount()):
                child = item.child(i)
                data = child.data(0, NAME_ROLE) if child is not None else None
                if child is None or not isinstance(data, tuple) or data[1] is None:
                    continue
                n = costs.tool_tokens.get((server, data[1])) if costs is not None else None
                allowed = child.checkState(0) == Qt.CheckState.Checked
                child.setText(2, tokens_text(n, costs, allowed=allowed) if costs is not None and n is not None else "")
        self.costs.setText(costs_text(costs, model, n_ctx))
        heavy = costs is not None and n_ctx is not None and costs.share_of(n_ctx) > TOOLS_SHARE_WARN
        self.costs.setStyleSheet(f"color: {WARN_AMBER};" if heavy else "")

    def server_items(self) -> list[QTreeWidgetItem]:
        items = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [item for item in items if item is not None]

    def server_item(self, name: str) -> QTreeWidgetItem | None:
        return next((item for item in self.server_items() if item.text(0) == name), None)

    def tool_item(self, server: str, tool: str) -> QTreeWidgetItem | None:
        item = self.server_item(server)
        for i in range(item.childCount() if item is not None else 0):
            child = item.child(i) if item is not None else None
            if child is not None and child.data(0, NAME_ROLE) == (server, tool):
                return child
        return None

    def selected(self) -> tuple[str, str | None] | None:
        item = self.tree.currentItem()
        data = item.data(0, NAME_ROLE) if item is not None else None
        return (str(data[0]), data[1]) if isinstance(data, tuple) else None

    def _show_details(self) -> None:
        sel = self.selected()
        status = next((s for s in self.controller.statuses() if sel is not None and s.name == sel[0]), None)
        for b in (self.edit_button, self.remove_button, self.restart_button):
            b.setEnabled(status is not None)
        always = self.controller.always_allowed(sel[0]) if sel is not None else []
        self.ask_again_button.setEnabled(bool(always) and (sel is None or sel[1] is None or sel[1] in always))
        if status is None:
            self.details.setText("Select a server to see what it runs and its last error.")
            return
        text = f"{status.name} ({status.transport}): {status.target}"
        if status.last_error:
            text += f"\nLast error: {status.last_error}"
        text += "\nRuns without asking: " + (", ".join(always) if always else "no tool (every call is asked)")
        self.details.setText(text)

    def _item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        data = item.data(0, NAME_ROLE)
        if column != 0 or not isinstance(data, tuple):
            return
        on = item.checkState(0) == Qt.CheckState.Checked
        server, tool = data
        self._apply(
            lambda: (
                self.controller.set_enabled(server, on)
                if tool is None
                else self.controller.set_tool_allowed(server, tool, on)
            )
        )

    def _apply(self, change: Callable[[], None]) -> None:
        try:
            change()
        except (McpConfigError, OSError) as exc:
            self.controller.status.emit(f"Not saved: {exc}")
            self.refresh()
            return
        self.load_raw()

    # -- buttons -------------------------------------------------------------------------------
    def add_server(self) -> ServerDialog:
        return self._open_dialog(None, NEW_ENTRY)

    def edit_server(self) -> ServerDialog | None:
        sel = self.selected()
        if sel is None:
            return None
        entry = self.controller.config.server(sel[0]).to_json()
        return self._open_dialog(sel[0], json.dumps(entry, indent=2, ensure_ascii=False) + "\n")

    def _open_dialog(self, old_name: str | None, text: str) -> ServerDialog:
        self.dialog = ServerDialog(self.controller, old_name, text, self)
        self.dialog.accepted.connect(self.load_raw)
        self.dialog.open()
        return self.dialog

    def remove_server(self) -> None:
        sel = self.selected()
        if sel is not None:
            self._apply(lambda: self.controller.remove(sel[0]))

    def restart_server(self) -> None:
        sel = self.selected()
        if sel is not None:
            self.controller.restart(sel[0])

    def ask_again(self) -> None:
        """The selected tool (or every tool of the selected server) is asked again before it runs."""
        sel = self.selected()
        if sel is not None:
            self.controller.ask_again(sel[0], sel[1])

    # -- raw JSON ------------------------------------------------------------------------------
    def load_raw(self) -> None:
        self.raw.setPlainText(self.controller.config_text())
        self.raw_error.hide()

    def save_raw(self) -> bool:
        try:
            self.controller.save_text(self.raw.toPlainText())
        except McpConfigError as exc:
            self.show_raw_error(str(exc))
            return False
        except OSError as exc:
            self.show_raw_error(f"Cannot save {self.controller.path}: {exc}")
            return False
        self.raw_error.hide()
        return True

    def show_raw_error(self, text: str) -> None:
        self.raw_error.setText(" ".join(text.split()))  # one line, whatever the message holds
        self.raw_error.show()
