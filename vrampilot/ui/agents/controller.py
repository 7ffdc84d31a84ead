"""The MCP servers as the window holds them: the config (mcp.json in the data folder), the running
McpManager, and the approvals the user chose to remember.

The manager reports on its own thread, and so does an "Always allow" answered during a reply: those
only mark the list changed, and a timer on the GUI thread emits `servers_changed` (no Python-side
emit from another thread: PySide6 6.12.0 drops a reference to `True` on each one, and a server
retried with backoff for a whole session made the interpreter crash, as vrampilot/ui/meters/feed.py
says). A change of which tools are allowed is saved and takes effect at once (the catalog is built
from the config each reply); any other change (a server added, removed, turned on or off, or its
command, URL, env or headers edited) starts the servers again with the saved config, the old ones
closed off the GUI thread.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from vrampilot.agents import (
    ApprovalPolicy,
    McpConfig,
    McpConfigError,
    McpManager,
    ServerEntry,
    ServerStatus,
    State,
    ToolCatalog,
    ToolInfo,
    default_config_path,
    load_config,
    parse_config,
    save_config,
)


class AgentsController(QObject):
    servers_changed = Signal()  # a server's status, the config, or both changed (always on the GUI thread)
    status = Signal(str)

    def __init__(self, path: Path | None = None, *, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path = path or default_config_path()
        self.policy = ApprovalPolicy()
        # Changes reported on other threads (the manager's, the engine's for an "Always allow"):
        # marked here, emitted on the GUI thread within a fifth of a second.
        self._changed = threading.Event()
        self._poll = QTimer(self)
        self._poll.setInterval(200)
        self._poll.timeout.connect(self._emit_if_changed)
        self._poll.start()
        self.policy.on_change = self._changed.set
        self.manager: McpManager | None = None
        self.load_error: str | None = None  # mcp.json as found at start could not be read (one line)
        try:
            self.config = load_config(self.path)
        except McpConfigError as exc:
            self.config = McpConfig((), self.path)
            self.load_error = str(exc)
        self._closed = False

    # -- servers -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the enabled servers (nothing runs without any)."""
        if self._closed or not self.config.enabled():
            return
        self.manager = McpManager(self.config, on_status=lambda _s: self._changed.set())
        self.manager.start()

    def _emit_if_changed(self) -> None:
        if self._changed.is_set():
            self._changed.clear()
            self.servers_changed.emit()

    def _restart_all(self) -> None:
        old, self.manager = self.manager, None
        if old is not None:
            old.on_status = None
            # Closing waits for each child to end (up to seconds): never on the GUI thread.
            threading.Thread(target=old.close, name="mcp-close", daemon=True).start()
        self.start()
        self.servers_changed.emit()

    def restart(self, name: str) -> None:
        if self.manager is not None and name in {s.name for s in self.config.enabled()}:
            self.manager.restart(name)
            self.status.emit(f"Starting the MCP server {name} again")

    def shutdown(self) -> None:
        self._closed = True
        self._poll.stop()
        old, self.manager = self.manager, None
        if old is not None:
            old.on_status = None
            old.close()

    # -- what the view shows -------------------------------------------------------------------
    def statuses(self) -> list[ServerStatus]:
        """One per configured server, in the config's order."""
        running = {s.name: s for s in self.manager.statuses()} if self.manager is not None else {}
        out = []
        for entry in self.config.servers:
            s = running.get(entry.name)
            if s is None or (entry.disabled and s.state is not State.DISABLED):
                state = State.DISABLED if entry.disabled else State.STOPPED
                s = ServerStatus(entry.name, state, entry.transport, entry.describe())
            out.append(replace(s, tools=tuple(self._allowed(t) for t in s.tools)))
        return out

    def _allowed(self, tool: ToolInfo) -> ToolInfo:
        try:
            entry = self.config.server(tool.server)
        except KeyError:
            return replace(tool, allowed=False)
        return replace(tool, allowed=entry.allows(tool.name))

    def listed_tools(self) -> list[ToolInfo]:
        """Every tool the ready servers list, `allowed` as the config says now."""
        tools = self.manager.tools(allowed_only=False) if self.manager is not None else []
        return [self._allowed(t) for t in tools]

    def catalog(self) -> ToolCatalog:
        """The tools offered to the model now: those of ready servers that the config allows."""
        return ToolCatalog.build(self.listed_tools())

    def config_text(self) -> str:
        """mcp.json as it is on disk (what the raw editor opens), or the config as the app holds it."""
        try:
            return self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return json.dumps(self.config.to_json(), indent=2, ensure_ascii=False) + "\n"

    # -- changes (each saved at once; a bad one is one line, nothing saved) -----------------------
    def save_text(self, text: str) -> None:
        """The raw editor's text: checked whole before anything is written (McpConfigError)."""
        self.apply(parse_config(text, self.path))

    def put_server(self, name: str, entry_text: str, old_name: str | None = None) -> None:
        """Add a server, or replace `old_name`'s entry, from the JSON object of one entry."""
        name = name.strip()
        if not name:
            raise McpConfigError("the server needs a name")
        if name != old_name and name in {s.name for s in self.config.servers}:
            raise McpConfigError(f'a server named "{name}" exists already')
        try:
            raw = json.loads(entry_text) if entry_text.strip() else {}
        except json.JSONDecodeError as exc:
            raise McpConfigError(
                f'server "{name}": not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}'
            ) from None
        entries: dict[str, object] = {}
        for s in self.config.servers:  # an edited server keeps its place in the list
            entries[name if s.name == old_name else s.name] = raw if s.name == old_name else s.to_json()
        entries.setdefault(name, raw)
        self.apply(parse_config(json.dumps({"mcpServers": entries}), self.path))
        if old_name is not None and old_name != name and self.policy.tools_of(old_name):
            self.policy.forget(old_name)  # approvals are by server name: a renamed one is asked again

    def remove(self, name: str) -> None:
        self.apply(replace(self.config, servers=tuple(s for s in self.config.servers if s.name != name)))
        # A server added later under this name is another program: it starts with every call asked.
        if self.policy.tools_of(name):
            self.policy.forget(name)

    # -- approvals ("Always allow this tool", revoked here) -------------------------------------
    def always_allowed(self, server: str) -> list[str]:
        """The tools of `server` that run without asking (the user's "Always allow this tool")."""
        return self.policy.tools_of(server)

    def ask_again(self, server: str, tool: str | None = None) -> None:
        """Revoke "Always allow": `tool`'s calls (or every tool's of `server`) are asked again."""
        names = [tool] if tool is not None else self.policy.tools_of(server)
        if not names:
            return
        self.policy.forget(server, tool)
        self.status.emit(f"Calls of {', '.join(f'{server}/{n}' for n in names)} will be asked before they run")

    def set_enabled(self, name: str, on: bool) -> None:
        self._change(name, disabled=not on)

    def set_tool_allowed(self, name: str, tool: str, on: bool) -> None:
        entry = self.config.server(name)
        listed = [t.name for s in self.statuses() if s.name == name for t in s.tools]
        allowed = list(entry.allowed_tools) if entry.allowed_tools is not None else listed
        allowed = [t for t in allowed if t != tool] + ([tool] if on else [])
        # Every listed tool allowed again: no list at all, so tools the server adds later are offered too.
        everything = entry.allowed_tools is None and set(listed) <= set(allowed)
        self._change(name, allowed_tools=None if everything else tuple(allowed))

    def _change(self, name: str, **changes: object) -> None:
        servers = tuple(replace(s, **changes) if s.name == name else s for s in self.config.servers)  # type: ignore[arg-type]  # ServerEntry's own fields
        self.apply(replace(self.config, servers=servers))

    def apply(self, config: McpConfig) -> None:
        """Save `config` and run it: servers started again only when more than allowedTools changed."""
        old = self.config
        save_config(config, self.path)
        self.config = replace(config, path=self.path)
        self.load_error = None
        if _runtime(old) == _runtime(self.config):
            if self.manager is not None:
                self.manager.config = self.config  # its probe lists tools with the new allowance
            self.servers_changed.emit()
        else:
            self._restart_all()
        self.status.emit(f"Saved {self.path}")


def _runtime(config: McpConfig) -> tuple[ServerEntry, ...]:
    """What running the servers depends on: everything but which tools are allowed."""
    return tuple(replace(s, allowed_tools=None) for s in config.servers)
