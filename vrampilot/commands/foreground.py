"""A bundled server run in the foreground of a command: started, announced once ready, stopped by
Ctrl+C or SIGTERM (a service manager's stop), and when it dies on its own the command says why in
one line and exits with a status a shell reads (128+N for signal N).

`serve` and `rpc-host` share it so that both treat Ctrl+C, a server that never becomes ready and a
server that dies later the same way. A stop always stops: a server that has not ended
`STOP_GRACE_S` after it was asked (stopped by SIGSTOP, hung) is killed, and a second Ctrl+C or
SIGTERM kills it at once.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

from vrampilot.errors import UserError
from vrampilot.server import HealthWatch, ServerConfig, ServerExited, ServerProcess
from vrampilot.server.process import exit_status, exit_text
from vrampilot.server.watchdog import ANSWERS_AGAIN

# SIGTERM too: without a handler Python dies at once and the server, told by the kernel, outlives
# the command for the seconds it takes to shut down (a restarted service finds its port taken).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
POLL_S = 0.25


def run_in_foreground(
    server: ServerProcess,
    ready: Callable[[threading.Event], None],
    *,
    label: str,
    binary: str,
    watch: ServerConfig | None = None,
) -> int:
    """Start `server`, call `ready(stopping)` (it waits, announces, and raises UserError when the server
    does not come up, InterruptedError when `stopping` is set first), then wait for the server; with
    `watch` (a llama-server's config), say when it stops answering and when it answers again. Returns 0 after Ctrl+C, 130 when Ctrl+C came before
    ready, else the server's own status (128+N when signal N ended it, 1 when it reported 0 unasked)."""
    stopping = threading.Event()

    def on_stop(_signum: int, _frame: object) -> None:
        if stopping.is_set():
            server.kill()  # asked twice: the user will not wait for it
        stopping.set()
        server.interrupt()

    previous = {sig: signal.signal(sig, on_stop) for sig in STOP_SIGNALS}
    code: int | None = None
    health = HealthWatch(server, watch, _say_hang) if watch is not None else None
    try:
        server.start()
        if stopping.is_set():  # asked before there was a process to pass it on to
            server.interrupt()
        try:
            ready(stopping)
        except InterruptedError:
            return 130
        except (ServerExited, UserError) as exc:
            if stopping.is_set():
                return 130
            raise UserError(str(exc)) from None
        if health is not None:
            health.start()
        while code is None and not stopping.is_set():
            code = server.wait_exit(POLL_S)
    finally:
        if health is not None:
            health.stop()
        # Asked to stop: the server has STOP_GRACE_S from the request, then it is killed.
        code = server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server.killed:
            print(f"vrampilot: {binary} did not stop when asked and was killed", file=sys.stderr)
    if stopping.is_set():
        print(f"vrampilot: {label} stopped", file=sys.stderr)
        return 0
    print(f"vrampilot: {exit_text(code, server.lines(), binary)}", file=sys.stderr)
    return exit_status(code)


def _say_hang(text: str | None) -> None:
    print(f"vrampilot: {text or ANSWERS_AGAIN}", file=sys.stderr, flush=True)
