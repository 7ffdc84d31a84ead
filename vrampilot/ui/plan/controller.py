"""The machine and the plan, and loading it: state and work behind the Plan panel.

It owns what the plan depends on (machine, target, pins; the model is the library's choice,
vrampilot.ui.library.controller) and the plan itself, asks the core for each on a worker (latest
request wins), and loads the plan on the engine thread. Who needs the model loaded (a reply, a
one-click re-plan) says so with `load(then=...)` or `when_planned(...)`: the callback runs when
that happens, or its failure callback with the reason, instead of anyone polling. Every failure
leaves the panel usable: an unreadable model falls back to the one before it, or to the built-in
model, with a line saying why.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from vrampilot.engine import LoadResult
from vrampilot.errors import UserError
from vrampilot.gguf import ModelSpec, load_model_spec, matching_projector
from vrampilot.hardware import (
    GPU_BACKEND_CHOICES,
    GpuBackendError,
    Machine,
    RpcHost,
    RpcHostError,
    group_cards,
    load_profiles,
    parse_hosts,
    query_hosts,
)
from vrampilot.log import describe_error
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Alternative, Pins, Plan
from vrampilot.planner.search.alternatives import changed_pins
from vrampilot.planner.search.cache_table import cache_table
from vrampilot.planner.search.choose import plan
from vrampilot.planner.search.draft import plan_with_draft, request_from_text, stored_acceptance
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.server.binaries import PORTABLE_NOTE, exported_command
from vrampilot.speed import MachineSpeed, MeasuredMachine, detect_measured_machine
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.library.controller import LibraryController, unreadable
from vrampilot.ui.plan.hardware_view import HardwareView
from vrampilot.ui.plan.speed_controller import SpeedController
from vrampilot.ui.plan.view import SHELL_NAMES, PlanView
from vrampilot.units import format_tokens

TARGET_MACHINE = "machine"
TARGET_CPU = "cpu"
PROFILE_PREFIX = "profile:"

PlanFn = Callable[[Plan], None]
LoadedFn = Callable[[LoadResult | None], None]  # None: the plan is served by llama-server
FailFn = Callable[[str], None]
ConfirmFn = Callable[[str, str], bool]


class LoadState(enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"


class PlanController(QObject):
    plan_shown = Signal(object)  # Plan
    model_failed = Signal(str)  # why the chosen model could not be read
    model_read = Signal(object)  # Path: a model the user chose was read (an earlier failure is over)
    loaded = Signal(object)  # LoadResult
    unloaded = Signal()
    load_state_changed = Signal(object)  # LoadState
    status = Signal(str)
    # The shown plan uses RPC hosts or drafts with MTP: it runs in llama-server (vrampilot.ui.server.controller),
    # which answers with served() or serve_failed().
    serve_requested = Signal()

    def __init__(
        self,
        ctx: AppContext,
        speed: SpeedController,
        plan_view: PlanView,
        library: LibraryController,
        hardware_view: HardwareView,
        *,
        confirm: ConfirmFn,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.view = plan_view
        self.library = library
        self.hardware_view = hardware_view
        self.confirm = confirm
        self.machine: Machine | None = None
        self.machine_speed: MachineSpeed | None = None
        self.target_key = TARGET_MACHINE
        self.target: Target | None = None
        self.spec: ModelSpec | None = None
        self.pins = Pins()
        self.plan: Plan | None = None
        self.load_state = LoadState.UNLOADED
        self.load_result: LoadResult | None = None
        self._chat_busy = False  # a reply streams: loading now would pull the model from under it
        # The pins and target the loaded model was planned with: once the user changes either, the
        # next reply loads the plan shown (what they set applies, not silently what ran before).
        self._loaded_for: tuple[Pins, str] | None = None
        # Tokens the enabled tools' schemas take in every prompt (set_tools_tokens): in every
        # model's pins, never remembered with them.
        self.tools_tokens: int | None = None
        self._loading_for: tuple[Pins, str] | None = None
        self._plan_waiters: list[tuple[PlanFn, FailFn]] = []
        self._load_waiters: list[tuple[LoadedFn, FailFn]] = []
        # Measures the machine and learns from replies; what it learns changes this target.
        self.speed = speed
        self.speed.measured.connect(self._speed_measured)
        self.speed.status.connect(self.status)
        self.speed.measuring.connect(self.view.set_measuring)
        self._serve_waiters: list[tuple[LoadedFn, FailFn]] = []
        self._served = False  # llama-server runs the model (the Server tab, or a plan with RPC hosts)
        # RPC hosts for "This machine" and "CPU only" plans (planner.target.resolve_target): as
        # typed, and as they answered (vrampilot.hardware.rpc).
        self.rpc_text = ctx.prefs.rpc_hosts()
        self.rpc_hosts: list[RpcHost] = []
        self.rpc_budgets: dict[str, int] = {}
        # The backend for cards several can drive ("auto", "cuda", "vulkan"), kept in the settings.
        self.gpu_backend = ctx.prefs.gpu_backend()
        # Speculative decoding as asked in the view ("" off, "ngram", "mtp", a draft model's path).
        self.draft_text = ""

        plan_view.pins_changed.connect(self.set_pins)
        plan_view.alternative_chosen.connect(self.use_alternative)
        plan_view.target_changed.connect(self.set_target)
        plan_view.rpc_hosts_changed.connect(self.set_rpc_hosts)
        plan_view.gpu_backend_changed.connect(self.set_gpu_backend)
        plan_view.draft_changed.connect(self.set_draft)
        plan_view.cache_count_requested.connect(self._count_cache)
        plan_view.set_rpc_hosts(self.rpc_text)
        plan_view.load_requested.connect(lambda: self.load())
        plan_view.cancel_load_requested.connect(self.cancel_load)
        plan_view.unload_requested.connect(self.unload)
        library.chosen.connect(self.select_model)
        library.status.connect(self.status)
        engine = ctx.engine
        engine.load_progress.connect(lambda v: self.view.show_loading(v))
        engine.loaded.connect(self._loaded)
        engine.load_failed.connect(self._load_failed)
        engine.unloaded.connect(self._unloaded)
        self._show_load_state()

    @property
    def model_path(self) -> Path | None:
        """The model planned (the library's choice; set before its file is read)."""
        return self.library.current

    @model_path.setter
    def model_path(self, path: Path | None) -> None:
        self.library.current = path

    def _retarget(self) -> None:
        """The target for the key chosen, also the one the library's rows are rated against."""
        self.target = self.library.target = self._make_target(self.target_key)

    # -- machine and targets -------------------------------------------------------------------
    def start(self, initial_model: Path | None) -> None:
        """Detect the machine (or take the context's), then plan `initial_model`, the last one or the built-in."""
        self.model_path = initial_model
        if initial_model is not None:
            self.ctx.library.add_file(initial_model)
        if self.ctx.machine is not None:
            self._machine_ready(self.ctx.machine)
        else:
            self.ctx.tasks.submit(
                lambda _t: detect_measured_machine(),
                done=self._machine_ready,
                failed=self._failed("looking at this machine"),
                owner=self,
            )

    def _machine_ready(self, found: MeasuredMachine) -> None:
        machine = self.machine = found.machine
        self.machine_speed = found.speed  # what was measured on it, for its targets
        self.hardware_view.set_machine(machine)
        if not machine.gpus and not machine.llama.offload_devices:
            self.status.emit("No GPU found: planning for the CPU")
        targets = [(TARGET_MACHINE, "This machine"), (TARGET_CPU, "CPU only")]
        try:
            targets += [(PROFILE_PREFIX + p.name, f"{p.name} (profile)") for p in load_profiles()]
        except Exception as exc:  # profiles are optional for the window; say why they are missing
            self.status.emit(f"GPU profiles unavailable: {describe_error(exc)}")
        self.view.set_targets(targets, self.target_key)
        choices = {b for c in group_cards(machine.llama, machine.gpus) if len(c.devices) > 1 for b in c.backends}
        self.view.set_gpu_backends(
            [(flag, name) for flag, name in GPU_BACKEND_CHOICES.items() if name in choices], self.gpu_backend
        )
        self._retarget()
        if self.rpc_text:
            self.set_rpc_hosts(self.rpc_text)
        restored = self.model_path is None
        path = self.model_path
        if path is None:
            last = self.ctx.prefs.last_model()
            path = last if last is not None and last.is_file() else embedded_model_path()
        self.library.refresh()
        self.speed.machine_ready(found, path)
        if path is not None:
            self.select_model(path, fallback=restored)
        else:
            self.view.show_message("No model yet: open a GGUF file or drop one on the window.")

    def _speed_measured(self, speed: object) -> None:
        """The probe ran, a model's weight types were measured, or a reply was learned: later plans
        use it, and the shown plan is made again with it."""
        if self.machine is None:
            return
        self.machine_speed = speed  # type: ignore[assignment]  # the probe's Signal(object) carries a MachineSpeed
        self._retarget()
        self.replan()

    def _target_request(self, key: str) -> TargetRequest:
        """The target combo's choice as a request: a profile, or this machine (its GPUs under the
        backend set here, or its CPU alone) with the RPC hosts that answered."""
        if key.startswith(PROFILE_PREFIX):
            name = key[len(PROFILE_PREFIX) :]
            return TargetRequest(profile=next(p for p in load_profiles() if p.name == name))
        cpu_only = key == TARGET_CPU
        return TargetRequest(
            cpu_only=cpu_only,
            gpu_backend=None if cpu_only else GPU_BACKEND_CHOICES.get(self.gpu_backend),
            rpc_hosts=tuple(self.rpc_hosts),
            rpc_budget_bytes=self.rpc_budgets,
        )

    def _make_target(self, key: str) -> Target:
        assert self.machine is not None
        request = self._target_request(key)
        try:
            return resolve_target(request, self.machine, self.machine_speed)
        except GpuBackendError as exc:
            # A setting kept from another machine (or a card since removed): the default still plans.
            self.status.emit(f"{exc}: planning with the default backend")
            return resolve_target(replace(request, gpu_backend=None), self.machine, self.machine_speed)

    def set_gpu_backend(self, value: str) -> None:
        """The Plan panel's GPU backend ("auto", "cuda", "vulkan"): kept, and the plan made again."""
        self.gpu_backend = value
        self.ctx.prefs.set_gpu_backend(value)
        self.set_target(self.target_key)

    def set_rpc_hosts(self, text: str) -> None:
        """Ask the hosts typed (in a worker: a host may take seconds to answer), then plan with them."""
        self.rpc_text = text
        self.ctx.prefs.set_rpc_hosts(text)
        try:
            listed = parse_hosts(text)
        except RpcHostError as exc:
            self.status.emit(str(exc))
            return

        def ask(_task: object) -> tuple[list[RpcHost], dict[str, int]]:
            return query_hosts(listed)

        def done(answered: tuple[list[RpcHost], dict[str, int]]) -> None:
            self.rpc_hosts, self.rpc_budgets = answered
            if self.rpc_hosts:
                self.status.emit(f"RPC hosts answered: {', '.join(h.endpoint for h in self.rpc_hosts)}")
            self.set_target(self.target_key)

        def failed(exc: BaseException) -> None:
            self.rpc_hosts, self.rpc_budgets = [], {}
            self.status.emit(describe_error(exc, context="asking the RPC hosts") + " (planning without them)")
            self.set_target(self.target_key)

        self.ctx.tasks.submit(ask, done=done, failed=failed, key="rpc-hosts", owner=self)

    def set_target(self, key: str) -> None:
        if self.machine is None:
            return
        self.target_key = key
        self._retarget()
        self.view.set_targets_current(key)
        self.replan()

    def shutdown(self) -> None:
        """With the window: nothing more reaches it, and measuring stops (speed_controller.py)."""
        self.blockSignals(True)
        self.library.blockSignals(True)
        self.speed.shutdown()

    def set_chat_busy(self, busy: bool) -> None:
        self._chat_busy = busy
        self._show_load_state()

    def loadable(self) -> str | None:
        """Why the shown plan cannot be loaded here, or None."""
        if self._chat_busy:
            return "Generating…"
        if self.target_key not in (TARGET_MACHINE, TARGET_CPU):
            return "This plan is for a GPU this machine does not have: export it, or plan for this machine to load"
        if self.plan is None:
            return "Planning…"
        return None

    # -- model and plan ------------------------------------------------------------------------
    def select_model(self, path: Path, *, fallback: bool = False, instead: bool = False) -> None:
        """Plan `path`. An unreadable file never becomes the model: the previous one stays (or, at
        start and with `fallback`, the built-in model is used) and `model_failed` says why.
        `instead`: `path` replaces one that failed, whose message stays up."""
        path = Path(path)
        previous = self.model_path if self.spec is not None else None
        self.model_path = path
        self.view.show_planning(path.name)

        def done(spec: ModelSpec) -> None:
            self.spec = spec
            self.pins = replace(self.ctx.prefs.pins_for(path), tools_tokens=self.tools_tokens)
            self.ctx.prefs.set_last_model(path)
            self.library.select(path)
            self.replan()
            self._find_projector(spec)
            self.speed.model_selected(spec)
            if not instead:
                self.model_read.emit(path)

        def failed(exc: BaseException) -> None:
            why = f"Could not read {path.name}: {unreadable(exc)}"
            embedded = embedded_model_path()
            back = previous if previous is not None and previous != path else None
            if back is None and embedded is not None and embedded != path:
                back = embedded
            if self.ctx.prefs.last_model() == path:
                self.ctx.prefs.set_last_model(back or "")
            if back is not None:
                why += f"; using {back.name} instead" if back != embedded else "; using the built-in model instead"
            self.model_failed.emit(why)
            self.status.emit(why)
            self.model_path = back
            if back is None:
                self.spec = None
                self.plan = None
                self.view.show_message(why)
                self._show_load_state()
                self._fail_plan_waiters(why)
                return
            self.library.select(back)
            if back == previous and self.spec is not None and self.plan is not None:
                self.view.set_plan(self.plan)  # the previous model's plan, shown again
                self._show_load_state()
                self._fail_plan_waiters(why)
            else:
                self.select_model(back, instead=True)

        self.ctx.tasks.submit(lambda _t: load_model_spec(path), done=done, failed=failed, key="spec", owner=self)

    def _find_projector(self, spec: ModelSpec) -> None:
        """The vision projector beside the model that fits it, for the Plan panel's control (read
        off the GUI thread: it opens each mmproj*.gguf's header)."""
        self.view.show_projector_found(None, spec.path.name)

        def done(found: Path | None) -> None:
            if self.spec is spec:
                self.view.show_projector_found(found, spec.path.name)

        self.ctx.tasks.submit(lambda _t: matching_projector(spec), done=done, key="mmproj-find", owner=self)

    def projector_available(self) -> bool:
        """Whether the model has a vision projector the user can turn on (found beside it, or pinned)."""
        return self.view.projector_path() is not None

    def set_pins(self, pins: Pins) -> None:
        self.pins = pins
        self.view.show_projector_pins(pins)
        if self.model_path is not None:
            self.ctx.prefs.set_pins_for(self.model_path, pins)
            self.library.show_pins(self.model_path, pins)
        self.replan()

    def set_tools_tokens(self, tokens: int | None) -> None:
        """The enabled tools' schemas take `tokens` of every prompt (vrampilot.engine.tool_tokens
        count_tools_tokens counts them for the model): the plan's context budget shows them and
        warns past a quarter of the context. The settings do not change, so a loaded model stays
        current (loaded_is_current)."""
        self.tools_tokens = tokens or None
        if self.pins.tools_tokens != self.tools_tokens:
            self.set_pins(replace(self.pins, tools_tokens=self.tools_tokens))

    def set_draft(self, text: str) -> None:
        """Draft with a model, by n-gram lookup, or not at all (planner/search/draft.py plans it)."""
        if text == self.draft_text:
            return
        self.draft_text = text
        self.replan()

    def use_alternative(self, alt: Alternative) -> None:
        if self.plan is not None:
            self.set_pins(replace(self.pins, **changed_pins(self.plan.settings, alt.settings)))  # type: ignore[arg-type]  # a dict of Pins fields; mypy cannot match **dict to each field

    def replan(self) -> None:
        if self.spec is None or self.target is None:
            return
        spec, target, pins = self.spec, self.target, self.pins
        self.view.offer_mtp_drafting(spec.n_layer_nextn > 0)
        self.view.show_planning(spec.path.name)

        def failed(exc: BaseException) -> None:
            why = f"No plan for {spec.path.name}: {describe_error(exc)}"
            self.status.emit(why)
            self.view.show_message(why)
            self._show_load_state()
            self._fail_plan_waiters(why)

        draft = request_from_text(self.draft_text)

        def work(_t: object) -> Plan:
            if draft is None:
                return plan(spec, target, pins, exact=True)
            acceptance = stored_acceptance(spec.path, draft)
            return plan_with_draft(spec, target, pins, draft, acceptance=acceptance, exact=True)

        self.ctx.tasks.submit(work, done=self._show_plan, failed=failed, key="plan", owner=self)

    def _count_cache(self, p: Plan) -> None:
        """The Plan panel's cache by part for an architecture llama.cpp counts (its dry runs)."""
        self.ctx.tasks.submit(
            lambda _t: cache_table(p.spec, p.settings),
            done=lambda table: self.view.show_cache_table(p, table),
            key="cache-table",
            owner=self,
        )

    def _show_plan(self, p: Plan) -> None:
        self.plan = p
        self.view.set_plan(p)
        self._show_load_state()
        self.plan_shown.emit(p)
        waiters, self._plan_waiters = self._plan_waiters, []
        for on_plan, _ in waiters:
            on_plan(p)

    def replan_and_load(self, pins: Pins) -> None:
        """A one-click fix (a spill, documents that need more context): re-plan with `pins`, load it."""
        self.set_pins(pins)
        self.when_planned(lambda _p: self.load(), self.status.emit)

    def copy_command(self, shell: str) -> str:
        """The shown plan as a llama-server command line for `shell`, on the clipboard."""
        from PySide6.QtGui import QGuiApplication

        p = self.plan
        if p is None:
            self.status.emit("No plan to export yet")
            return ""
        try:
            text = exported_command(p.spec.path, p.settings, shell, elsewhere=p.target.elsewhere)
        except UserError as exc:  # a file name this shell cannot hold safely: nothing is copied
            self.status.emit(str(exc))
            return ""
        QGuiApplication.clipboard().setText(text)
        note = "" if p.fits else " (this plan does not fit: it may fail to load)"
        copied = f"Copied the llama-server command for {SHELL_NAMES[shell]}"
        if p.target.elsewhere:
            # What the line is comes first: a narrow status bar cuts the end of a long line.
            self.status.emit(f"{copied}: {PORTABLE_NOTE} ({p.spec.path.name}){note}")
        else:
            self.status.emit(f"{copied} ({p.spec.path.name}){note}")
        return text

    def planning(self) -> bool:
        return self.ctx.tasks.is_running("plan") or self.ctx.tasks.is_running("spec")

    def when_planned(self, on_plan: PlanFn, on_failed: FailFn) -> None:
        """`on_plan(plan)` once the plan for the current model, target and pins is shown (now, if it is)."""
        p = self.plan
        if p is not None and not self.planning() and p.pins == self.pins and p.spec.path == self.model_path:
            on_plan(p)
        else:
            self._plan_waiters.append((on_plan, on_failed))

    def _fail_plan_waiters(self, why: str) -> None:
        waiters, self._plan_waiters = self._plan_waiters, []
        for _, on_failed in waiters:
            on_failed(why)

    # -- load ----------------------------------------------------------------------------------
    def is_loaded(self, path: Path | None = None) -> bool:
        r = self.load_result
        return self.load_state is LoadState.LOADED and r is not None and (path is None or r.plan.spec.path == path)

    def loaded_is_current(self) -> bool:
        """The loaded model is the shown model with the pins and target it was loaded for."""
        loaded = self._loaded_for
        # The tools' tokens change what the plan says of the context, not what llama.cpp loads.
        return (
            self.is_loaded(self.model_path)
            and loaded is not None
            and (replace(loaded[0], tools_tokens=None), loaded[1])
            == (replace(self.pins, tools_tokens=None), self.target_key)
        )

    def profile_shown(self) -> str | None:
        """The GPU profile "Plan for" shows (a plan for a card this machine does not have), or None."""
        return self.target_key.removeprefix(PROFILE_PREFIX) if self.target_key.startswith(PROFILE_PREFIX) else None

    def loaded_answers(self) -> bool:
        """Whether the chat can reply with the model as loaded: it is current, or a GPU profile's
        plan is shown over this machine's loaded plan of the same model and pins (that plan is for
        another machine: the chat keeps replying with this one, and "Plan for" stays as chosen)."""
        loaded_for = self._loaded_for
        return self.loaded_is_current() or (
            self.profile_shown() is not None
            and self.is_loaded(self.model_path)
            and loaded_for is not None
            and loaded_for[0] == self.pins
        )

    def load(self, then: LoadedFn | None = None, failed: FailFn | None = None) -> None:
        """Load the shown plan (this machine's, when another GPU's is shown); `then` or `failed` follow."""
        then = then or (lambda _r: None)
        failed = failed or (lambda _w: None)
        if self.load_state is LoadState.LOADING:
            self._load_waiters.append((then, failed))
            return
        if self._chat_busy:
            failed("a reply is being generated")
            return
        if self.target_key not in (TARGET_MACHINE, TARGET_CPU):
            # A GPU profile is shown: the model can only load with this machine's own plan.
            self.status.emit("Planning for this machine to load the model (the profile's plan is for another GPU)")
            self.set_target(TARGET_MACHINE)
            self.when_planned(lambda _p: self.load(then, failed), failed)
            return
        if self.plan is None or self.planning():
            self.when_planned(lambda _p: self.load(then, failed), failed)
            return
        p = self.plan
        if not p.fits:
            why = p.refused or (p.reasons[-1] if p.reasons else "it does not fit")
            if not self.confirm(
                "Load a plan that does not fit?", f"{why}\n\nLoading may fail or be slow. Load anyway?"
            ):
                failed("Not loaded: the plan does not fit")
                return
        if p.settings.server_only:
            # RPC hosts (ggml ends its process when one goes away) and MTP drafting run in llama-server.
            self._serve_waiters.append((then, failed))
            self.status.emit(
                f"{p.spec.path.name} runs in llama-server ({p.settings.server_only}): starting it with the plan…"
            )
            self.serve_requested.emit()
            return
        self._load_waiters.append((then, failed))
        self._loading_for = (self.pins, self.target_key)
        self.load_state = LoadState.LOADING
        self.view.show_loading(0.0)
        self._show_load_state()
        self.status.emit(f"Loading {p.spec.path.name}…")
        self.ctx.engine.load(p)

    def served(self, backend: object | None) -> None:
        """llama-server started with the plan (a backend) or stopped (None)."""
        self._served = backend is not None
        self._show_load_state()
        if backend is None:
            return
        waiters, self._serve_waiters = self._serve_waiters, []
        for then, _ in waiters:
            then(None)

    def serve_failed(self, why: str) -> None:
        waiters, self._serve_waiters = self._serve_waiters, []
        for _, failed in waiters:
            failed(why)

    def cancel_load(self) -> None:
        if self.load_state is LoadState.LOADING:
            self.ctx.engine.cancel_load()

    def unload(self) -> None:
        if self.load_state is LoadState.LOADED:
            self.ctx.engine.unload()

    def _loaded(self, result: LoadResult) -> None:
        self.load_state = LoadState.LOADED
        self.load_result = result
        msg = f"Loaded {result.plan.spec.path.name} in {result.load_s:.1f} s"
        self._loaded_for = self._loading_for
        if result.changes and self.plan is not None:
            msg = "llama.cpp could not allocate the plan; backed off: " + "; ".join(result.changes)
            # Show what runs: pin what the back-off changed, and the cache types it kept.
            ran = result.plan.settings
            kept = {**changed_pins(self.plan.settings, ran), "type_k": ran.type_k, "type_v": ran.type_v}
            pins = replace(self.pins, **kept)  # type: ignore[arg-type]  # a dict of Pins fields; mypy cannot match **dict to each field
            self.pins = pins
            self._loaded_for = (pins, self.target_key)
            if self.model_path is not None:
                self.ctx.prefs.set_pins_for(self.model_path, self.pins)
                self.library.show_pins(self.model_path, self.pins)
            self.replan()
        self.status.emit(msg)
        self._show_load_state()
        self.load_state_changed.emit(self.load_state)
        self.loaded.emit(result)
        waiters, self._load_waiters = self._load_waiters, []
        for then, _ in waiters:
            then(result)

    def _load_failed(self, exc: BaseException, cancelled: bool) -> None:
        self.load_state = LoadState.UNLOADED
        self.load_result = None
        self._loaded_for = None
        text = "Loading cancelled" if cancelled else f"Could not load: {describe_error(exc)}"
        self.status.emit(text)
        self._show_load_state(text)
        self.load_state_changed.emit(self.load_state)
        waiters, self._load_waiters = self._load_waiters, []
        for _, failed in waiters:
            failed(text)

    def _unloaded(self) -> None:
        self.load_state = LoadState.UNLOADED
        self.load_result = None
        self._loaded_for = None
        self.status.emit("Model unloaded")
        self._show_load_state()
        self.load_state_changed.emit(self.load_state)
        self.unloaded.emit()

    def _show_load_state(self, failure: str = "") -> None:
        """The Load/Cancel/Unload area and its line, from the state alone."""
        r = self.load_result
        if self.load_state is LoadState.LOADING:
            self.view.show_load_state("loading", "Loading…", can_load=False)
            return
        self.view.show_loading(None)
        why = self.loadable()
        if self.load_state is LoadState.LOADED and r is not None:
            same = (
                self.plan is not None
                and r.plan.spec.path == self.plan.spec.path
                and r.plan.settings == self.plan.settings
            )
            text = f"Loaded: {r.plan.spec.path.name}, {format_tokens(r.plan.settings.n_ctx)} context"
            profile = self.profile_shown()
            if profile is not None:
                # Load cannot apply another GPU's plan here: say what the chat uses instead.
                text += f", planned for this machine: the chat replies with it. The plan above is for {profile}: export it to run there"
            elif not same:
                text += " — the plan above differs: press Load to apply it"
            self.view.show_load_state("loaded", text, can_load=why is None, why=why or "", reload=same)
        elif self._served and not failure:
            self.view.show_load_state(
                "unloaded",
                "Running in llama-server (Server tab): the chat replies through it",
                can_load=why is None,
                why=why or "",
            )
        else:
            self.view.show_load_state("unloaded", failure or "Not loaded", can_load=why is None, why=why or "")

    def _failed(self, what: str) -> Callable[[BaseException], None]:
        def report(exc: BaseException) -> None:
            self.status.emit(f"Error {what}: {describe_error(exc, context=what)}")

        return report
