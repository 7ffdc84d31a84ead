"""The configured MCP servers, connected through the official `mcp` SDK (2.x) on an asyncio loop of
their own thread, so neither the window nor the chat's worker ever waits on one.

Each server is supervised on its own: started (stdio: the entry's command; HTTP: its URL), its
tools listed, then kept open and probed while idle. A server that cannot start (a command that
does not exist, one that exits, one that does not answer within the start timeout) or dies later
is reported with its last error and started again after a growing wait (backoff), up to a number
of tries; one failing server never stops the others.

A stdio server gets the SDK's small environment allow-list (PATH, HOME, USER, ...: the SDK's
`get_default_environment`) plus what its entry's "env" names, never the app's whole environment.
Header values go to the server only: nothing here logs or shows them.

The API is Qt-free and thread-safe: `statuses()`, `tools()`, `call()`; `on_status` is called (on the
manager's thread) whenever a server's status changes, for the window to turn into a signal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import IO, Any, TextIO, cast

from vrampilot.agents.config import McpConfig, ServerEntry

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 120.0
PROBE_EVERY_S = 15.0
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # waits before each new try; then the server is given up
STDERR_TAIL_CHARS = 400


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"  # with last_error; retried after retry_in_s unless given up
    STOPPED = "stopped"
    DISABLED = "disabled"  # "disabled": true in the config


@dataclass(frozen=True)
class ToolInfo:
    """A tool a server lists. `allowed`: the config's allowedTools lets the model see it."""

    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any] = field(repr=False)
    allowed: bool = True


@dataclass(frozen=True)
class ServerStatus:
    name: str
    state: State
    transport: str  # "stdio" or "http"
    target: str  # the command line or the URL (never header or env values)
    last_error: str | None = None
    tools: tuple[ToolInfo, ...] = ()
    tries: int = 0  # failed starts since it last was ready
    retry_in_s: float | None = None  # None: no retry planned (ready, or given up)


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result as text the model reads (untrusted: never rendered as HTML or run)."""

    text: str
    is_error: bool
    duration_s: float


class McpManager:
    def __init__(
        self,
        config: McpConfig,
        *,
        start_timeout_s: float = START_TIMEOUT_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
        backoff_s: tuple[float, ...] = BACKOFF_S,
        on_status: Callable[[ServerStatus], None] | None = None,
    ) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self.call_timeout_s = call_timeout_s
        self.backoff_s = backoff_s
        self.on_status = on_status
        self._lock = threading.Condition()
        self._status: dict[str, ServerStatus] = {
            s.name: ServerStatus(s.name, State.DISABLED if s.disabled else State.STOPPED, s.transport, s.describe())
            for s in config.servers
        }
        self._clients: dict[str, Any] = {}  # name -> mcp.Client while ready (touched on the loop only)
        self._wake: dict[str, asyncio.Event] = {}
        self._restart: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start every enabled server (returns at once; watch `statuses()` or `wait_settled`)."""
        if self._thread is not None:
            return
        loop = asyncio.new_event_loop()
        self._loop = loop
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            loop.run_forever()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="mcp-servers", daemon=True)
        self._thread.start()
        started.wait()
        asyncio.run_coroutine_threadsafe(self._start_all(), loop).result()

    async def _start_all(self) -> None:
        for entry in self.config.enabled():
            self._wake[entry.name] = asyncio.Event()
            self._restart[entry.name] = asyncio.Event()
            self._tasks.append(asyncio.get_running_loop().create_task(self._supervise(entry)))

    def close(self, timeout_s: float = 15.0) -> None:
        """Stop every server: each supervisor is cancelled, and the SDK ends a stdio child (stdin
        closed, then terminated, then killed) even when it hung while starting."""
        loop = self._loop
        if loop is None or self._thread is None:
            return
        self._closing = True
        with contextlib.suppress(concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(self._stop_all(), loop).result(timeout_s)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout_s)
        self._thread = None

    async def _stop_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def __enter__(self) -> McpManager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def restart(self, name: str) -> None:
        """Try `name` again now (after a failure, or after it was given up)."""
        loop = self._loop
        if loop is not None and name in self._restart:
            loop.call_soon_threadsafe(self._restart[name].set)

    def wait_settled(self, timeout_s: float) -> list[ServerStatus]:
        """Until every enabled server is ready or has failed its first try (the CLI waits for this
        before asking the model: a tool is offered only when its server answers)."""

        def settled() -> bool:
            return all(s.state is not State.STARTING and (s.state is not State.STOPPED) for s in self._enabled())

        with self._lock:
            self._lock.wait_for(settled, timeout=timeout_s)
            return list(self._status.values())

    def _enabled(self) -> list[ServerStatus]:
        return [self._status[s.name] for s in self.config.enabled()]

    # -- what the window and the tool loop read ------------------------------------------------
    def statuses(self) -> list[ServerStatus]:
        with self._lock:
            return list(self._status.values())

    def tools(self, *, allowed_only: bool = True) -> list[ToolInfo]:
        """The tools of the servers now ready (only those the config allows, by default)."""
        with self._lock:
            return [
                t
                for s in self._status.values()
                if s.state is State.READY
                for t in s.tools
                if t.allowed or not allowed_only
            ]

    def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        cancel: threading.Event | None = None,
        timeout_s: float | None = None,
    ) -> ToolOutcome:
        """Run one tool and wait for its result; every failure is an outcome with is_error (the model
        is told, the chat goes on). `cancel` (Stop) abandons the call at once."""
        loop = self._loop
        t0 = time.perf_counter()
        if loop is None:
            return ToolOutcome("the MCP servers are not started", True, 0.0)
        timeout = timeout_s if timeout_s is not None else self.call_timeout_s
        fut = asyncio.run_coroutine_threadsafe(self._call(server, tool, dict(arguments), timeout), loop)
        while True:
            try:
                return fut.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set():
                    fut.cancel()
                    return ToolOutcome("the call was stopped by the user", True, time.perf_counter() - t0)
            except concurrent.futures.CancelledError:
                return ToolOutcome("the call was stopped", True, time.perf_counter() - t0)

    # -- on the loop ---------------------------------------------------------------------------
    def _set(self, name: str, **changes: Any) -> None:
        with self._lock:
            status = replace(self._status[name], **changes)
            self._status[name] = status
            self._lock.notify_all()
        if self.on_status is not None:
            try:
                self.on_status(status)
            except Exception:  # a listener's bug must not stop the servers
                log.exception("MCP status listener failed")

    async def _supervise(self, entry: ServerEntry) -> None:
        name = entry.name
        try:
            await self._retry_forever(entry)
        finally:
            self._set(name, state=State.STOPPED, retry_in_s=None, tools=())

    async def _retry_forever(self, entry: ServerEntry) -> None:
        name = entry.name
        tries = 0
        while not self._closing:
            self._set(name, state=State.STARTING, retry_in_s=None)
            error = await self._session(entry)
            if self._closing:
                break
            if self._status[name].state is State.READY or error is None:
                tries = 0  # it had been ready: a crash starts the count again
            tries += 1
            given_up = tries > len(self.backoff_s)
            delay = None if given_up else self.backoff_s[tries - 1]
            why = error or "the server closed the connection"
            if given_up:
                why += f" (gave up after {tries} tries; restart it to try again)"
            log.warning("MCP server %s: %s", name, why)
            self._set(name, state=State.FAILED, last_error=why, tools=(), tries=tries, retry_in_s=delay)
            restart = self._restart[name]
            restart.clear()
            if delay is None:
                await restart.wait()
                tries = 0
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(restart.wait(), delay)

    async def _session(self, entry: ServerEntry) -> str | None:
        """One connection, from start to its end: None when it ended because the app closes it,
        otherwise why it ended (one line)."""
        import anyio
        from mcp import Client

        errlog: IO[str] | None = None
        if entry.command is not None:  # the child's stderr, whose last line says why it stopped
            errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115  # closed in the finally below
        ready = False
        try:
            # The deadline covers the start only; the scope encloses the connection's own task
            # groups (anyio wants them nested), and is lifted once the tools are listed.
            with anyio.CancelScope(deadline=anyio.current_time() + self.start_timeout_s) as scope:
                async with contextlib.AsyncExitStack() as stack:
                    transport = await _transport(entry, errlog, stack)
                    client = await stack.enter_async_context(Client(transport, cache=None))
                    tools = await _list_tools(client, entry)
                    scope.deadline = math.inf
                    ready = True
                    self._clients[entry.name] = client
                    self._set(entry.name, state=State.READY, last_error=None, tools=tools, tries=0)
                    log.info("MCP server %s ready: %d tools", entry.name, len(tools))
                    return await self._serve(entry.name, client)
            return f"did not answer within {self.start_timeout_s:g} s of starting" + _tail(errlog)
        except Exception as exc:  # a server fails in any way; none of it may stop the others
            return _error_text(entry, exc, ready) + _tail(errlog)
        finally:
            self._clients.pop(entry.name, None)
            if errlog is not None:
                errlog.close()

    async def _serve(self, name: str, client: Any) -> str | None:
        """Keep the connection open; probe it while idle so a server that died is noticed (and
        restarted) before the model needs it."""
        import anyio

        wake = self._wake[name]
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), PROBE_EVERY_S)
            if self._closing:
                return None
            if wake.is_set():
                wake.clear()
                return "the server closed the connection"
            try:  # the tool list is the probe (ping is gone from the 2026 protocol), and refreshes it
                with anyio.fail_after(self.start_timeout_s):
                    tools = await _list_tools(client, self.config.server(name))
            except Exception as exc:
                return f"stopped answering ({_root(exc)})"
            if tools != self._status[name].tools:
                self._set(name, tools=tools)
        return None

    async def _call(self, server: str, tool: str, arguments: dict[str, Any], timeout_s: float) -> ToolOutcome:
        import anyio
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        t0 = time.perf_counter()
        client = self._clients.get(server)
        if client is None:
            status = self._status.get(server)
            why = status.last_error if status is not None and status.last_error else "it is not running"
            return ToolOutcome(f"the MCP server {server} cannot take calls: {why}", True, 0.0)
        try:
            with anyio.fail_after(timeout_s):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            return ToolOutcome(f"{tool} did not answer within {timeout_s:g} s", True, time.perf_counter() - t0)
        except Exception as exc:
            root = _root(exc)
            if isinstance(root, MCPError) and root.code == CONNECTION_CLOSED:
                self._wake[server].set()  # the server died: restart it
                return ToolOutcome(
                    f"the MCP server {server} stopped during the call (it crashed or exited)",
                    True,
                    time.perf_counter() - t0,
                )
            return ToolOutcome(f"{tool} failed: {root}", True, time.perf_counter() - t0)
        return ToolOutcome(result_text(result), bool(result.is_error), time.perf_counter() - t0)


async def _transport(entry: ServerEntry, errlog: IO[str] | None, stack: contextlib.AsyncExitStack) -> Any:
    """The SDK's transport for the entry: a child process over stdio, or streamable HTTP."""
    if entry.command is not None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=entry.command, args=list(entry.args), env=dict(entry.env) or None, cwd=entry.cwd
        )
        assert errlog is not None
        return stdio_client(params, errlog=cast(TextIO, errlog))
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers=dict(entry.headers), timeout=httpx2.Timeout(30.0, read=300.0))
    )
    assert entry.url is not None
    return streamable_http_client(entry.url, http_client=http)


async def _list_tools(client: Any, entry: ServerEntry) -> tuple[ToolInfo, ...]:
    out: list[ToolInfo] = []
    cursor: str | None = None
    for _ in range(100):  # a server whose pages never end cannot hang the start
        page = await client.list_tools(cursor=cursor)
        out += [
            ToolInfo(entry.name, t.name, t.description or "", dict(t.input_schema or {}), entry.allows(t.name))
            for t in page.tools
        ]
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(out)


def result_text(result: Any) -> str:
    """A CallToolResult as the text the model reads: text blocks as they are, other blocks named,
    structured content as JSON when there is no text."""
    import json

    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} of type {getattr(block, 'mime_type', '?')}, not shown to the model]")
        else:
            parts.append(f"[{kind or 'content'} not shown to the model]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _root(exc: BaseException) -> BaseException:
    """The one error inside anyio's exception groups (a task group wraps what its task raised)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _error_text(entry: ServerEntry, exc: BaseException, ready: bool) -> str:
    root = _root(exc)
    if isinstance(root, FileNotFoundError) and entry.command is not None:
        return f"the command {entry.command!r} was not found (is it installed and on PATH?)"
    if isinstance(root, PermissionError) and entry.command is not None:
        return f"the command {entry.command!r} cannot be run: permission denied"
    text = str(root) or type(root).__name__
    if text == "Connection closed":
        return "exited while starting" if not ready else "the server closed the connection"
    if type(root).__module__.startswith("httpx"):
        return f"cannot reach {entry.url}: {text}"
    return text


def _tail(errlog: IO[str] | None) -> str:
    """The server's last stderr line, which usually says why it stopped."""
    if errlog is None:
        return ""
    try:
        errlog.seek(0)
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f": {lines[-1][:STDERR_TAIL_CHARS]}" if lines else ""
