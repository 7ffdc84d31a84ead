"""Serving the planned model from the app: start, watch, stop llama-server, and hand the chat to it.

States: stopped, starting (the model loads in llama-server), ready, stopping, crashed (with the
reason from its log). Starting frees the in-app model first, so the model is in memory once; while
the server is ready the chat replies through its API (vrampilot.server.backend.ServerBackend) and the
meters watch the server's process. Stopping hands the chat back to the in-process engine. The
process is started on the GUI thread, which lives as long as the app: on Linux the kernel ends the
server with it (vrampilot.server.process), and quitting stops it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from vrampilot.gguf import ProjectorSpec
from vrampilot.log import describe_error
from vrampilot.meters import Sampler
from vrampilot.planner.plan import Plan
from vrampilot.server import HealthWatch, PortInUseError, ServerConfig, ServerExited, ServerProcess, free_port
from vrampilot.server.backend import ServerBackend
from vrampilot.server.launch import prepare
from vrampilot.server.process import exit_text, health, lan_address
from vrampilot.server.watchdog import HANG_AFTER_S
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.plan.controller import LoadState, PlanController
from vrampilot.ui.server.view import ServerPanel

POLL_MS = 1000
_METRIC = re.compile(r"^llamacpp:(\w+)\s+([0-9.eE+-]+)$")


class ServerController(QObject):
    backend_changed = Signal(object)  # ServerBackend while ready, else None
    status = Signal(str)
    _log_line = Signal(str)  # from the log reader's thread, queued to the GUI thread
    _answering = Signal(object, object)  # (server, why it does not answer or None), from the watch's thread
    # How long a ready server may answer nothing before the status line says so (server/watchdog.py).
    hang_after_s = HANG_AFTER_S

    def __init__(
        self,
        ctx: AppContext,
        panel: ServerPanel,
        plans: PlanController,
        sampler: Sampler,
        *,
        confirm: Callable[[str, str], bool],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.ctx, self.panel, self.plans, self.sampler = ctx, panel, plans, sampler
        self.confirm = confirm
        self.state = "stopped"
        self.server: ServerProcess | None = None
        self.config: ServerConfig | None = None
        self.backend: ServerBackend | None = None
        self.model_path: Path | None = None  # what the server loads
        self.projector: ProjectorSpec | None = None  # the vision projector it loads (sizes an image's tokens)
        self.served_plan: Plan | None = None  # the plan it runs
        self.serving: tuple[Path, object] | None = None  # the model and settings it runs
        self._restart = False
        self._watch: HealthWatch | None = None
        self._answering.connect(self._show_answering)
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)
        self._log_line.connect(panel.append_log)
        panel.start_requested.connect(self.start)
        plans.serve_requested.connect(self.start)  # a plan with RPC hosts runs only in llama-server
        panel.stop_requested.connect(self.stop)
        panel.lan_toggled.connect(self._lan_toggled)
        panel.port_changed.connect(lambda _port: self._show_url())
        panel.new_key_requested.connect(lambda: panel.set_key(secrets.token_urlsafe(24)))
        self._show_url()

    # -- settings ------------------------------------------------------------------------------
    def _lan_toggled(self, on: bool) -> None:
        # Other devices may only connect with a key: it is made the moment the switch is on.
        if on and self.panel.settings().api_key is None:
            self.panel.set_key(secrets.token_urlsafe(24))
        if not on:
            self.panel.set_key(None)
        self._show_url()

    def _config(self) -> ServerConfig:
        settings = self.panel.settings()  # a blank key is no key: a new one is made for the network
        host = "0.0.0.0" if settings.lan else "127.0.0.1"
        return ServerConfig(host, settings.port, settings.api_key, public=True, on_log=self._log_line.emit)

    def _show_url(self) -> None:
        config = self._config()
        # On the network, the address the other devices type; here, the loopback one.
        host = "127.0.0.1" if config.loopback_only else lan_address()
        self.panel.show_url(f"http://{host}:{config.port}/v1")

    def _set_state(self, state: str, text: str) -> None:
        self.state = state
        self.panel.show_state(state, text)
        self.status.emit(text)
        if state == "crashed" or (state == "stopped" and text.startswith(("Cannot serve", "Port "))):
            self.plans.serve_failed(text)  # a plan with RPC hosts waited for this server

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        plan = self.plans.plan
        if self.state == "ready" and plan is not None and self.backend is not None:
            if (plan.spec.path, plan.settings) == self.serving:
                self.plans.served(self.backend)  # already running this plan
            else:
                self._restart = True  # another plan: stop this server, then start with the plan shown
                self.stop()
            return
        if self.state in ("starting", "ready", "stopping"):
            return
        why = self.plans.loadable()
        if plan is None or why:
            self._set_state("stopped", f"Cannot serve yet: {why or 'no plan'}")
            return
        if not plan.fits:
            reason = plan.refused or (plan.reasons[-1] if plan.reasons else "it does not fit")
            if not self.confirm("Serve a plan that does not fit?", f"{reason}\n\nServe anyway?"):
                self.plans.serve_failed("Not served: the plan does not fit")
                return
        config = self._config()
        if not config.loopback_only and not config.api_key:  # never open to the network without a key
            self.panel.set_key(secrets.token_urlsafe(24))
            config = self._config()
        try:
            server = prepare(plan, config)
        except PortInUseError as exc:
            suggestion = exc.suggestion or free_port(config.host, near=config.port)
            self._set_state("stopped", f"Port {config.port} is in use by another program; port {suggestion} is free")
            self.panel.set_port(suggestion)
            return
        except Exception as exc:
            self._set_state("crashed", describe_error(exc, context="preparing llama-server"))
            return
        # One copy of the model in memory: the in-app engine lets it go first.
        if self.plans.load_state is LoadState.LOADED:
            self.plans.unload()
        self.panel.clear_log()
        self.config = config
        self.model_path = plan.spec.path
        self.projector = plan.memory.projector.spec if plan.memory.projector is not None else None
        self.served_plan = plan
        self.serving = (plan.spec.path, plan.settings)
        self.server = server
        server.start()  # here, on the GUI thread: it lives as long as the app
        self._set_state("starting", f"Starting: loading {plan.spec.path.name} in llama-server…")
        # The process's own wait: a port taken after the check reads as llama-server's words here.
        self.ctx.tasks.submit(
            lambda task: server.wait_ready(config.base_url, cancel=task.cancelled, api_key=config.api_key),
            done=lambda _r: self._ready(server),
            failed=lambda e: self._failed(server, e),
            key="server-ready",
            owner=self,
            long=True,
        )

    def _ready(self, server: ServerProcess) -> None:
        if server is not self.server or self.config is None:
            return
        self.backend = ServerBackend(
            self.config.base_url,
            api_key=self.config.api_key,
            model_path=self.model_path,
            projector=self.projector,
            plan=self.served_plan,
        )
        self._set_state("ready", self._serving_text(server))
        if server.pid is not None:
            self.sampler.watch(server.pid)
        self.backend_changed.emit(self.backend)  # the chat takes the server first...
        self.plans.served(self.backend)  # ...then what waited for it (a plan with RPC hosts) replies through it
        self._timer.start()
        self._watch = HealthWatch(
            server, self.config, lambda why: self._answering.emit(server, why), hang_after_s=self.hang_after_s
        )
        self._watch.start()

    def _serving_text(self, server: ServerProcess) -> str:
        assert self.config is not None
        return f"Serving at {self.config.base_url}/v1 (pid {server.pid})"

    def _show_answering(self, server: ServerProcess, why: str | None) -> None:
        """A ready server that stops answering stays the one served (it may come back); the status
        line says so, and Stop still stops it."""
        if server is not self.server or self.state != "ready" or self.config is None:
            return
        text = why or self._serving_text(server)
        self.panel.show_state("hung" if why else "ready", text)
        self.status.emit(text)

    def _failed(self, server: ServerProcess, exc: BaseException) -> None:
        if server is not self.server:
            return
        if isinstance(exc, InterruptedError):
            return  # stopped while starting: stop() says so
        self.server = None
        if isinstance(exc, ServerExited):
            text = exit_text(exc.code, exc.lines)
        else:
            text = describe_error(exc, context="starting llama-server")
        self._set_state("crashed", f"llama-server did not start: {text}")

    # -- while it runs -------------------------------------------------------------------------
    def _poll(self) -> None:
        server = self.server
        if server is None:
            self._timer.stop()
            return
        if not server.running:
            self._timer.stop()
            self._gone()
            self.server = None
            self._set_state("crashed", exit_text(server.returncode, server.lines()))
            return
        config = self.config
        if config is None:
            return

        def read(_task: object) -> str:
            return metrics_text(config.base_url, config.api_key)

        self.ctx.tasks.submit(read, done=self._show_metrics, failed=lambda _e: None, key="server-metrics", owner=self)

    def _show_metrics(self, text: str) -> None:
        m = parse_metrics(text)
        if not m:
            return
        parts = [
            f"{int(m.get('tokens_predicted_total', 0))} tokens generated",
            f"{int(m.get('prompt_tokens_total', 0))} prompt tokens read",
        ]
        if m.get("predicted_tokens_seconds"):
            parts.append(f"{m['predicted_tokens_seconds']:.1f} tokens/s generating")
        if m.get("requests_processing"):
            parts.append(f"{int(m['requests_processing'])} request(s) in progress")
        self.panel.show_stats(" · ".join(parts))

    # -- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        server = self.server
        if server is None or self.state == "stopping":
            return
        self._stop_watch()
        self._set_state("stopping", "Stopping…")
        self.ctx.tasks.cancel("server-ready")
        self.ctx.tasks.submit(
            lambda _t: server.stop(),
            done=lambda code: self._stopped(server, code),
            failed=lambda e: self._stopped(server, None),
            owner=self,
        )

    def _stopped(self, server: ServerProcess, code: object) -> None:
        if server is not self.server:
            return
        self._timer.stop()
        self.server = None
        self._gone()
        self._set_state("stopped", f"Stopped (llama-server exited with status {code})")
        if self._restart:
            self._restart = False
            self.start()

    def _gone(self) -> None:
        """The chat and the meters go back to the app's own process."""
        self._stop_watch()
        self.backend = None
        self.backend_changed.emit(None)
        self.plans.served(None)  # the Plan panel stops saying the chat replies through it
        self.sampler.watch(None)

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def shutdown(self) -> None:
        """The app quits: the server goes with it."""
        self._timer.stop()
        self._stop_watch()
        if self.server is not None:
            self.server.stop(timeout_s=5)
            self.server = None


def metrics_text(base_url: str, api_key: str | None) -> str:
    import http.client

    host_port = base_url.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        resp = conn.getresponse()
        return resp.read().decode("utf-8", "replace") if resp.status == 200 else ""
    except OSError:
        return ""
    finally:
        conn.close()


def parse_metrics(text: str) -> dict[str, float]:
    """llama-server's Prometheus lines (`llamacpp:tokens_predicted_total 42`) as numbers."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


__all__ = ["ServerController", "health", "parse_metrics"]
