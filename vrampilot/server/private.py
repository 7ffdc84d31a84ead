"""A plan run in a llama-server of its own, for one command: `vrampilot chat` with RPC hosts.

ggml aborts the process that uses an RPC host which goes away, so plans across hosts never load
in VRAM Pilot's own process: a private llama-server on a free loopback port runs them, and the
command talks to it like the app's chat does (vrampilot.server.backend.ServerBackend). If the
server dies (a host went away), the command says why with the server's own last lines.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vrampilot.server.backend import ServerBackend, ServerChatError
from vrampilot.server.launch import launch
from vrampilot.server.process import PortInUseError, ServerConfig, ServerExited, ServerProcess, free_port

LOAD_TIMEOUT_S = 600.0
# The kernel closes a dying server's sockets: by the time a reply is cut it has ended, and waiting
# is for reaping it. A refusal it answered (a 400) costs this wait, once, before the error shows.
EXIT_GRACE_S = 2.0


PORT_TRIES = 3


def _launch_on_a_free_port(plan: Any) -> tuple[ServerProcess, ServerConfig]:
    """The server on a port the system called free. Between asking and binding, another program
    may take it (an outgoing connection's port is drawn from the same range): nobody else knows a
    private server's port, so it simply tries another."""
    for attempt in range(PORT_TRIES):
        config = ServerConfig("127.0.0.1", free_port(), secrets.token_urlsafe(16))
        try:
            return launch(plan, config, timeout_s=LOAD_TIMEOUT_S), config
        except PortInUseError:
            if attempt == PORT_TRIES - 1:
                raise
    raise AssertionError("unreachable")


@contextmanager
def private_server(plan: Any) -> Iterator[ServerBackend]:
    """llama-server running `plan` (a planner Plan) on 127.0.0.1, with a key nobody else has."""
    server, config = _launch_on_a_free_port(plan)
    try:
        proj = plan.memory.projector
        yield ServerBackend(
            config.base_url,
            api_key=config.api_key,
            model_path=plan.spec.path,
            projector=proj.spec if proj is not None else None,
            plan=plan,
        )
    except ServerChatError:
        # A reply cut off because the server died (a host went away mid-reply): its own
        # reason ("Remote RPC server crashed") says more than a closed connection does.
        if server.wait_exit(EXIT_GRACE_S) is None:
            raise
        raise ServerExited(server.returncode, server.lines()) from None
    finally:
        server.stop()
