"""A bundled server run in the foreground of a command: started, announced once ready, stopped by
Ctrl+C or SIGTERM (a service manager's stop), and when it dies on its own the command says why in
one line and exits with a status a shell reads (128+N for signal N).

`serve` and `rpc-host` share it so that both treat Ctrl+C, a server that never becomes ready and a
server that dies later the same way.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from vrampilot.errors import UserError
from vrampilot.server import ServerExited, ServerProcess
from vrampilot.server.process import exit_status, exit_text

# SIGTERM too: without a handler Python dies at once and the server, told by the kernel, outlives
# the command for the seconds it takes to shut down (a restarted service finds its port taken).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_in_foreground(server: ServerProcess, ready: Callable[[], None], *, label: str, binary: str) -> int:
    """Start `server`, call `ready` (it waits, announces, and raises UserError when the server does not
    come up), then wait for the server. Returns 0 after Ctrl+C, 130 when Ctrl+C came before ready,
    else the server's own status (128+N when signal N ended it, 1 when it reported 0 unasked)."""
    stopping = {"asked": False}

    def on_stop(_signum: int, _frame: object) -> None:
        stopping["asked"] = True
        server.interrupt()

    previous = {sig: signal.signal(sig, on_stop) for sig in STOP_SIGNALS}
    try:
        server.start()
        if stopping["asked"]:  # asked before there was a process to pass it on to
            server.interrupt()
        try:
            ready()
        except (ServerExited, UserError) as exc:
            if stopping["asked"]:
                return 130
            raise UserError(str(exc)) from None
        assert server.proc is not None
        code = server.proc.wait()
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping["asked"]:
        print(f"vrampilot: {label} stopped", file=sys.stderr)
        return 0
    print(f"vrampilot: {exit_text(code, server.lines(), binary)}", file=sys.stderr)
    return exit_status(code)
