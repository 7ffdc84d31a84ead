"""Which tool calls run without asking: the user's "Always allow this tool", per server and tool,
kept in the data folder (tool-approvals.json).

Only the user's own answer changes it (the window's dialog, the terminal's prompt): nothing a
model writes or a tool returns reaches this module, so a tool result can never approve itself.
"""

from __future__ import annotations

import enum
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from vrampilot.paths import data_dir

POLICY_FILE = "tool-approvals.json"


class Decision(enum.Enum):
    ALLOW_ONCE = "allow_once"
    ALWAYS = "always"  # allow now and from now on (remembered per server and tool)
    DENY = "deny"

    @property
    def allows(self) -> bool:
        return self is not Decision.DENY


class ApprovalPolicy:
    """Tools the user always allows, read from and written to one small JSON file. An unreadable
    or damaged file allows nothing (every call is asked again), never everything."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / POLICY_FILE
        self._lock = threading.Lock()
        self._always: dict[str, set[str]] = self._read()
        # Called after each change, on the thread that made it (the window's list of approvals
        # follows an "Always allow" answered during a reply).
        self.on_change: Callable[[], None] | None = None

    def _read(self) -> dict[str, set[str]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        always = data.get("always") if isinstance(data, dict) else None
        if not isinstance(always, dict):
            return {}
        return {
            str(server): {t for t in tools if isinstance(t, str)}
            for server, tools in always.items()
            if isinstance(tools, list)
        }

    def always_allowed(self, server: str, tool: str) -> bool:
        with self._lock:
            return tool in self._always.get(server, set())

    def remember(self, server: str, tool: str) -> None:
        """The user chose "Always allow this tool"."""
        with self._lock:
            self._always.setdefault(server, set()).add(tool)
            self._write()
        self._changed()

    def forget(self, server: str, tool: str | None = None) -> None:
        """Ask again for `tool` (or every tool of `server`)."""
        with self._lock:
            if tool is None:
                self._always.pop(server, None)
            else:
                self._always.get(server, set()).discard(tool)
            self._write()
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def entries(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted((s, t) for s, tools in self._always.items() for t in tools)

    def tools_of(self, server: str) -> list[str]:
        """The tools of `server` that run without asking, by name."""
        with self._lock:
            return sorted(self._always.get(server, set()))

    def _write(self) -> None:
        data = {"always": {s: sorted(t) for s, t in sorted(self._always.items()) if t}}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
