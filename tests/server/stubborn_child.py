"""`run_in_foreground` (what `serve` and `rpc-host` run) over a server that no stop signal reaches:
a real child process that ignores SIGINT and SIGTERM, as a server hung in a driver call does. Prints
`ready PID` once the child runs; the test sends this process its stop signals.

argv[1]: the grace, in seconds, the child gets after a stop signal before it is killed.
"""

from __future__ import annotations

import sys
import threading

from vrampilot.commands.foreground import run_in_foreground
from vrampilot.server import ServerProcess

IGNORES_STOP = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
)


def main() -> int:
    server = ServerProcess([sys.executable, "-c", IGNORES_STOP])
    server.grace_s = float(sys.argv[1])
    up = threading.Event()
    server.on_log = lambda _line: up.set()

    def ready(stopping: threading.Event | None = None) -> None:
        while not (up.wait(0.1) or (stopping is not None and stopping.is_set())):
            pass
        print(f"ready {server.pid}", flush=True)

    return run_in_foreground(server, ready, label="server", binary="stubborn-server")


if __name__ == "__main__":
    sys.exit(main())
