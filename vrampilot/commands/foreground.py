"""A bundled server run in the foreground of a command: started, announced once ready, stopped by
Ctrl+C, and when it dies on its own its exit status and last log lines become the command's.

`serve` and `rpc-host` share it so that both treat Ctrl+C, a server that never becomes ready and a
server that dies later the same way.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from vrampilot.errors import UserError
from vrampilot.server import ServerExited, ServerProcess
from vrampilot.server.process import killed_text

LOG_TAIL_LINES = 12


def run_in_foreground(server: ServerProcess, ready: Callable[[], None], *, label: str, binary: str) -> int:
    """Start `server`, call `ready` (it waits, announces, and raises UserError when the server does not
    come up), then wait for the server. Returns 0 after Ctrl+C, 130 when Ctrl+C came before ready,
    else the server's own status (1 when it reported 0 without being asked to stop; 128 + N when signal
    N ended it, as a shell says)."""
    stopping = {"asked": False}

    def on_sigint(_signum: int, _frame: object) -> None:
        stopping["asked"] = True
        server.interrupt()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        server.start()
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
        signal.signal(signal.SIGINT, previous)
    if stopping["asked"]:
        print(f"vrampilot: {label} stopped", file=sys.stderr)
        return 0
    tail = "\n".join(server.lines()[-LOG_TAIL_LINES:])
    head = killed_text(code, binary) or f"{binary} exited with status {code}"
    print(f"vrampilot: {head}:\n{tail}", file=sys.stderr)
    return 128 - code if code < 0 else code or 1  # killed by a signal: the shell's 128 + N
