"""The MCP servers the user configured: `mcp.json` in the data folder, in the shape Claude Desktop,
Cursor, LM Studio and Jan all write, so an entry pasted from any of them works:

    {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}, "cwd": "..."},
                    "OTHER": {"url": "https://...", "headers": {"Authorization": "Bearer ..."}}}}

Our own keys beside those: `"disabled": true` (LM Studio and Cline write the same key) and
`"allowedTools": [...]` (only these tools are offered to the model; without it, all of them).
Keys we do not know (`type`, `timeout`, `autoApprove`, ...) are kept as they are and otherwise
ignored, so a pasted entry never fails for a key another host added. A malformed file is one
UserError naming the server and the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrampilot.errors import UserError
from vrampilot.paths import data_dir

CONFIG_FILE = "mcp.json"


class McpConfigError(UserError):
    """The MCP config cannot be read as written: which file, which server, which field."""


@dataclass(frozen=True)
class ServerEntry:
    """One configured server: a command run over stdio, or a URL spoken to over streamable HTTP."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold tokens, as headers do
    cwd: str | None = None
    url: str | None = None
    # Sent with every request; values may be secrets (tokens): never logged, never shown (`describe`).
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    disabled: bool = False
    allowed_tools: tuple[str, ...] | None = None  # None: every tool the server lists
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)  # keys of other hosts, kept

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def allows(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools

    def describe(self) -> str:
        """What runs, for the user and the log: the command line or the URL, never header values
        or env values (tokens live there)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        if self.command is not None:
            out["command"] = self.command
            out["args"] = list(self.args)
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd is not None:
                out["cwd"] = self.cwd
        else:
            out["url"] = self.url
            if self.headers:
                out["headers"] = dict(self.headers)
        if self.disabled:
            out["disabled"] = True
        if self.allowed_tools is not None:
            out["allowedTools"] = list(self.allowed_tools)
        return out


@dataclass(frozen=True)
class McpConfig:
    servers: tuple[ServerEntry, ...] = ()
    path: Path | None = None  # where it was read from

    def enabled(self) -> tuple[ServerEntry, ...]:
        return tuple(s for s in self.servers if not s.disabled)

    def server(self, name: str) -> ServerEntry:
        for s in self.servers:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {"mcpServers": {s.name: s.to_json() for s in self.servers}}


def default_config_path() -> Path:
    return data_dir() / CONFIG_FILE


def load_config(path: Path | None = None, *, missing_ok: bool = True) -> McpConfig:
    """The config at `path` (the data folder's mcp.json by default). A missing default file is an
    empty config; a missing file the user named (`--mcp FILE`) is an error."""
    path = path or default_config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing_ok:
            return McpConfig((), path)
        raise McpConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{path}: cannot be read ({exc})") from None
    return parse_config(text, path)


def parse_config(text: str, path: Path | None = None) -> McpConfig:
    """Read the JSON text of an mcp.json (the GUI's raw editor checks with this before saving)."""
    where = str(path) if path is not None else "the MCP config"
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict):
        raise McpConfigError(f'{where}: expected an object with "mcpServers"')
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(f'{where}: "mcpServers" must be an object of NAME: {{...}}')
    return McpConfig(tuple(_entry(name, raw, where) for name, raw in servers.items()), path)


def save_config(config: McpConfig, path: Path | None = None) -> Path:
    """Write the config whole (a temporary file renamed over the old one: a crash never leaves half a
    file). The file holds tokens: readable by the user only where the system allows."""
    path = path or config.path or default_config_path()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(config.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if os.name == "posix":
        tmp.chmod(0o600)
    tmp.replace(path)
    return path


_KNOWN = {"command", "args", "env", "cwd", "url", "headers", "disabled", "allowedTools"}


def _entry(name: str, raw: object, where: str) -> ServerEntry:
    def bad(what: str) -> McpConfigError:
        return McpConfigError(f'{where}: server "{name}": {what}')

    if not name.strip():
        raise McpConfigError(f"{where}: a server has an empty name")
    if not isinstance(raw, dict):
        raise bad("expected an object with a command or a url")
    command, url = raw.get("command"), raw.get("url") or raw.get("serverUrl")  # serverUrl: Windsurf's key
    if command is not None and url is not None:
        raise bad('has both "command" and "url": keep one')
    if command is None and url is None:
        raise bad('needs "command" (a program run over stdio) or "url" (a streamable HTTP server)')
    disabled = raw.get("disabled", False)
    if not isinstance(disabled, bool):
        raise bad('"disabled" must be true or false')
    allowed = raw.get("allowedTools")
    if allowed is not None and not (isinstance(allowed, list) and all(isinstance(t, str) for t in allowed)):
        raise bad('"allowedTools" must be a list of tool names')
    extra = {k: v for k, v in raw.items() if k not in _KNOWN and k != "serverUrl"}
    common: dict[str, Any] = {
        "name": name,
        "disabled": disabled,
        "allowed_tools": tuple(allowed) if allowed is not None else None,
        "extra": extra,
    }
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise bad('"command" must be a non-empty text')
        args = raw.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise bad('"args" must be a list of texts')
        cwd = raw.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise bad('"cwd" must be a folder path')
        return ServerEntry(command=command, args=tuple(args), env=_texts(raw, "env", bad), cwd=cwd, **common)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise bad('"url" must start with http:// or https://')
    return ServerEntry(url=url, headers=_texts(raw, "headers", bad), **common)


def _texts(raw: dict[str, Any], key: str, bad: Any) -> dict[str, str]:
    value = raw.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise bad(f'"{key}" must be an object of text values')
    return dict(value)
