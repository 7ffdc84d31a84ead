"""A plan started in the bundled llama-server: the one way the Server tab, `vrampilot serve`, a chat
across RPC hosts (vrampilot.server.private) and the benchmarks start one.

The argument list comes from the one builder in vrampilot.export (so what the user copies is what
runs), the binary and its environment from vrampilot.server.binaries (the API key goes in the
environment, never on the command line). Callers keep only their presentation: `prepare` gives a
process not yet started, for the callers that must start it themselves (the CLI after its signal
handlers, the GUI on its own thread); `launch` starts it and waits until the model is loaded.
"""

from __future__ import annotations

import threading

from vrampilot.export import llama_server_argv
from vrampilot.planner.plan import Plan
from vrampilot.server.binaries import tool_env, tool_path
from vrampilot.server.process import ServerConfig, ServerExited, ServerProcess, check_port, port_in_use

DEFAULT_TIMEOUT_S = 300.0


def prepare(plan: Plan, config: ServerConfig) -> ServerProcess:
    """llama-server for `plan`, not started. PortInUseError when the port is taken (checked first:
    a clear message before any work), ToolMissingError when the engine has no llama-server."""
    check_port(config.host, config.port)
    argv = llama_server_argv(
        plan.spec.path,
        plan.settings,
        host=config.host,
        port=config.port,
        server=str(tool_path(config.binary)),
        alias=plan.spec.path.stem if config.public else None,
        metrics=config.public,
        chat_template_file=config.chat_template_file,
    )
    return ServerProcess(argv, tool_env(api_key=config.api_key), on_log=config.on_log)


def wait_ready(
    server: ServerProcess,
    config: ServerConfig,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> None:
    """Until the model is loaded. ServerExited when the server ends first; PortInUseError when it
    ended because another program bound the port between the check and the server's own bind."""
    try:
        server.wait_ready(config.base_url, timeout_s=timeout_s, cancel=cancel, api_key=config.api_key)
    except ServerExited as exc:
        if exc.port_taken:
            raise port_in_use(config.host, config.port) from None
        raise


def launch(plan: Plan, config: ServerConfig, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> ServerProcess:
    """llama-server running `plan`, started and ready; stopped again when it does not come up."""
    server = prepare(plan, config)
    server.start()
    try:
        wait_ready(server, config, timeout_s=timeout_s)
    except BaseException:
        server.stop()
        raise
    return server
