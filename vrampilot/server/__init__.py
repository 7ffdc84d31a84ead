"""The bundled llama-server: find it, start it exactly as planned, wait for it, watch that it answers,
stop it (a hung one too), read its log.

`vrampilot serve`, the app's Server panel, a chat across RPC hosts and the benchmarks all start it
through vrampilot.server.launch; the command line comes from the one builder in vrampilot.export,
so what the user copies is what the app runs.
"""

from vrampilot.server.binaries import ToolMissingError, tool_env, tool_path
from vrampilot.server.process import (
    PortInUseError,
    ServerConfig,
    ServerExited,
    ServerProcess,
    free_port,
    port_is_free,
)
from vrampilot.server.watchdog import HealthWatch

__all__ = [
    "HealthWatch",
    "PortInUseError",
    "ServerConfig",
    "ServerExited",
    "ServerProcess",
    "ToolMissingError",
    "free_port",
    "port_is_free",
    "tool_env",
    "tool_path",
]
