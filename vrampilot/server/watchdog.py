"""A llama-server that stops answering while it runs: said at once, not waited on in silence.

A server can be alive and answer nothing: stopped (SIGSTOP, a debugger, a terminal's Ctrl+Z),
stuck in a driver, or with every connection taken. Its clients then wait with nothing coming and
time out with 0 bytes, and since the process is there nothing else notices. The watch asks
GET /health every `POLL_S` (llama-server answers it from its HTTP threads, whatever its slots are
doing) and says once when nothing has answered for `HANG_AFTER_S`, and once when it answers again.
`vrampilot serve` prints it; the Server tab shows it in its status line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psutil

from vrampilot.server.process import ServerConfig, ServerProcess, health

POLL_S = 1.0
HANG_AFTER_S = 5.0
HEALTH_TIMEOUT_S = 2.0
ANSWERS_AGAIN = "llama-server answers again"


def hang_text(pid: int | None, silent_s: float) -> str:
    """What the user reads while the server does not answer, with the likely cause."""
    try:
        stopped = pid is not None and psutil.Process(pid).status() in (
            psutil.STATUS_STOPPED,
            psutil.STATUS_TRACING_STOP,
        )
    except psutil.Error:
        stopped = False
    why = (
        f"its process {pid} is stopped (SIGSTOP, a debugger or Ctrl+Z); `kill -CONT {pid}` continues it"
        if stopped
        else "it may be stuck, or busy with more connections than it has threads"
    )
    return f"llama-server does not answer (nothing from /health for {silent_s:.0f} s; {why})"


class HealthWatch:
    """Watches a ready server from a thread of its own; `on_change(text)` gets `hang_text` when it
    stops answering and None when it answers again (called on the watch's thread)."""

    def __init__(
        self,
        server: ServerProcess,
        config: ServerConfig,
        on_change: Callable[[str | None], None],
        *,
        hang_after_s: float = HANG_AFTER_S,
    ) -> None:
        self.server, self.config, self.on_change = server, config, on_change
        self.hang_after_s = hang_after_s
        self.hung = False
        self._quit = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the watch: a check under way when it is stopped reports nothing."""
        self._quit.set()

    def _run(self) -> None:
        answered = time.monotonic()
        while not self._quit.wait(POLL_S) and self.server.running:
            status = health(self.config.base_url, api_key=self.config.api_key, timeout_s=HEALTH_TIMEOUT_S)
            if self._quit.is_set() or not self.server.running:
                return  # stopped or ended meanwhile: whoever stopped it says so
            if status is not None:
                answered = time.monotonic()
                if self.hung:
                    self.hung = False
                    self.on_change(None)
            elif not self.hung and time.monotonic() - answered >= self.hang_after_s:
                self.hung = True
                self.on_change(hang_text(self.server.pid, time.monotonic() - answered))
