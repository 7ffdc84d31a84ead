"""The plan, explained: memory per device against the budget, predicted speed, every setting with
the planner's reason, the alternatives with their cost, and the pins that change it."""

from __future__ import annotations

import sys
from dataclasses import replace
from html import escape
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QStringListModel, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QCompleter,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from vrampilot.export import SHELLS
from vrampilot.planner.families import is_routed
from vrampilot.planner.plan import Alternative, Pins, Plan
from vrampilot.planner.search.cache_table import CacheTable, cache_table, tokens_label
from vrampilot.planner.search.explain import (
    FITS,
    REASON,
    SUGGESTION,
    TOO_BIG,
    WARNING,
    alternative_rows,
    last_measured,
    prompt_tokens,
    why_lines,
)
from vrampilot.planner.search.reasons import placement_text
from vrampilot.ui.plan.pin_controls import PinControls
from vrampilot.ui.plan.projector_control import ProjectorControl
from vrampilot.ui.stacked_bar import BarData, MemoryBar
from vrampilot.ui.theme import OK_GREEN, OVER_BUDGET, WARN_AMBER
from vrampilot.ui.wrap import wrappable
from vrampilot.units import format_bytes, format_count, format_tokens

SHELL_NAMES = {"bash": "bash", "powershell": "PowerShell", "cmd": "cmd"}
PROMPT_COLUMN = 3  # the Alternatives table's prompt speed, hidden first in a narrow column
ALTERNATIVE_HEADERS = ["Change", "Memory", "Full ctx\nt/s", "Prompt\nt/s", "Fits"]
CHANGE_MIN_CHARS = 11  # the "Change" column is never narrower: "attention" and "ubatch 1024" fit a line


def _signed_bytes(n: int) -> str:
    return ("+" if n > 0 else "") + format_bytes(n) if n else "±0"


class PlanView(QWidget):
    pins_changed = Signal(object)  # Pins
    target_changed = Signal(str)  # key from set_targets
    rpc_hosts_changed = Signal(str)  # "host:port=SIZE, ..." as typed
    gpu_backend_changed = Signal(str)  # "auto", "cuda", "vulkan" (hardware/cards.py)
    draft_changed = Signal(str)  # "", "ngram" or a draft model's path, as typed
    alternative_chosen = Signal(object)  # Alternative
    load_requested = Signal()
    cancel_load_requested = Signal()
    unload_requested = Signal()
    export_requested = Signal(str)  # shell
    # A plan whose "cache by part" needs llama.cpp's dry runs (an architecture the formula is not
    # verified on): up to one per context, too slow for the GUI thread; the controller counts it
    # in the background and hands it back with show_cache_table.
    cache_count_requested = Signal(object)  # Plan

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._plan: Plan | None = None
        self._measuring = ""  # the speed probe's state while it runs (SpeedController.measuring)
        self._loading = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)

        # Which model this plan is for (it may not be the row last clicked: an unreadable file
        # never becomes the model).
        self.model_label = QLabel()
        self.model_label.setObjectName("plan_model")
        self.model_label.setWordWrap(True)
        self.model_label.setTextFormat(Qt.TextFormat.RichText)
        outer.addWidget(self.model_label)

        # Target
        row = QHBoxLayout()
        row.addWidget(QLabel("Plan for"))
        self.target_box = QComboBox()
        self.target_box.setObjectName("target")
        _narrow_combo(self.target_box)
        self.target_box.currentTextChanged.connect(self.target_box.setToolTip)  # a long profile name, whole
        self.target_box.activated.connect(lambda _i: self.target_changed.emit(str(self.target_box.currentData())))
        row.addWidget(self.target_box, 1)
        outer.addLayout(row)
        # Which llama.cpp backend runs a card several can drive (an NVIDIA card under CUDA and
        # Vulkan); shown only on a machine that has such a card (set_gpu_backends).
        self.gpu_backend_row = QWidget()
        backend_row = QHBoxLayout(self.gpu_backend_row)
        backend_row.setContentsMargins(0, 0, 0, 0)
        backend_row.addWidget(QLabel("GPU backend"))
        self.gpu_backend = QComboBox()
        self.gpu_backend.setObjectName("gpu_backend")
        _narrow_combo(self.gpu_backend)
        self.gpu_backend.setToolTip(
            "The llama.cpp backend that runs a GPU several can drive. Auto: the vendor's own (CUDA on "
            "NVIDIA), which reads prompts faster; the plan's reasons say which device runs and why."
        )
        self.gpu_backend.activated.connect(
            lambda _i: self.gpu_backend_changed.emit(str(self.gpu_backend.currentData()))
        )
        backend_row.addWidget(self.gpu_backend, 1)
        self.gpu_backend_row.hide()
        outer.addWidget(self.gpu_backend_row)
        # Other machines' devices (llama.cpp RPC hosts), for "This machine" and "CPU only" plans.
        rpc_row = QHBoxLayout()
        rpc_row.addWidget(QLabel("RPC hosts"))
        self.rpc_hosts = QLineEdit()
        self.rpc_hosts.setObjectName("rpc_hosts")
        self.rpc_hosts.setPlaceholderText("host:port=6GiB, … (other PCs running `vrampilot rpc-host`)")
        self.rpc_hosts.setToolTip(
            "llama.cpp RPC hosts to spread layers over, each with the memory it may use. RPC has no "
            "authentication: use hosts on a network you trust. Plans with hosts run in llama-server."
        )
        self.rpc_hosts.editingFinished.connect(lambda: self.rpc_hosts_changed.emit(self.rpc_hosts.text().strip()))
        rpc_row.addWidget(self.rpc_hosts, 1)
        outer.addLayout(rpc_row)
        # Speculative decoding (planner/search/draft.py): a draft model, n-gram drafting, or the model's
        # own MTP block (offered by offer_mtp_drafting only for a file that has one).
        draft_row = QHBoxLayout()
        draft_row.addWidget(QLabel("Drafting"))
        self.draft = QLineEdit()
        self.draft.setObjectName("draft")
        self._draft_choices = QStringListModel(self)
        completer = QCompleter(self._draft_choices, self.draft)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.draft.setCompleter(completer)
        self.offer_mtp_drafting(False)
        self.draft.editingFinished.connect(lambda: self.draft_changed.emit(self.draft.text().strip()))
        draft_row.addWidget(self.draft, 1)
        outer.addLayout(draft_row)

        # Verdict, bars, speed
        self.verdict = QLabel()
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        outer.addWidget(self.verdict)
        # Where the model runs, in words: "every layer's attention on the GPU, experts of 14 of
        # 48 layers in RAM".
        self.placement = QLabel()
        self.placement.setObjectName("placement")
        self.placement.setWordWrap(True)
        self.placement.setTextFormat(Qt.TextFormat.RichText)
        outer.addWidget(self.placement)
        self.gpu_bar = MemoryBar()
        self.gpu_bar.setObjectName("gpu_bar")
        self.ram_bar = MemoryBar()
        self.ram_bar.setObjectName("ram_bar")
        outer.addWidget(self.gpu_bar)
        # One more bar per further device (a second GPU, RPC hosts): each has its own budget.
        self.device_bars_box = QVBoxLayout()
        self.device_bars_box.setContentsMargins(0, 0, 0, 0)
        self.device_bars: list[MemoryBar] = []
        outer.addLayout(self.device_bars_box)
        outer.addWidget(self.ram_bar)
        self.speed = QLabel()
        self.speed.setObjectName("speed")
        self.speed.setWordWrap(True)
        self.speed.setTextFormat(Qt.TextFormat.RichText)
        outer.addWidget(self.speed)
        self.draft_info = QLabel()
        self.draft_info.setObjectName("draft_info")
        self.draft_info.setWordWrap(True)
        self.draft_info.setTextFormat(Qt.TextFormat.RichText)
        self.draft_info.hide()
        outer.addWidget(self.draft_info)

        # Actions
        actions = QHBoxLayout()
        self.load_button = QPushButton("Load")
        self.load_button.setObjectName("load")
        self.load_button.clicked.connect(self.load_requested)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancel_load")
        self.cancel_button.clicked.connect(self.cancel_load_requested)
        self.cancel_button.hide()
        self.unload_button = QPushButton("Unload")
        self.unload_button.setObjectName("unload")
        self.unload_button.clicked.connect(self.unload_requested)
        self.unload_button.setEnabled(False)
        self.export_button = QToolButton()
        self.export_button.setObjectName("export")
        self.export_button.setText("Export")
        self.export_button.setToolTip("Copy the llama-server command for this plan")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        menu = QMenu(self.export_button)
        for shell in SHELLS:
            act = menu.addAction(f"Copy for {SHELL_NAMES[shell]}")
            act.setObjectName(f"export_{shell}")
            act.triggered.connect(lambda _c=False, s=shell: self.export_requested.emit(s))
        self.export_button.setMenu(menu)
        self.export_button.clicked.connect(
            lambda: self.export_requested.emit("powershell" if _is_windows() else "bash")
        )
        actions.addWidget(self.load_button)
        actions.addWidget(self.cancel_button)
        actions.addWidget(self.unload_button)
        actions.addStretch(1)
        actions.addWidget(self.export_button)
        outer.addLayout(actions)
        self.progress = QProgressBar()
        self.progress.setObjectName("load_progress")
        self.progress.setRange(0, 100)
        self.progress.hide()
        outer.addWidget(self.progress)
        self.load_status = QLabel()
        self.load_status.setObjectName("load_status")
        self.load_status.setWordWrap(True)
        outer.addWidget(self.load_status)

        # Settings and reasons
        settings_box = QGroupBox("Settings")
        sl = QVBoxLayout(settings_box)
        self.pins = PinControls()
        self.pins.pins_changed.connect(self.pins_changed)
        sl.addWidget(self.pins)
        self.projector = ProjectorControl()
        self.projector.setObjectName("projector")
        self.projector.changed.connect(self._projector_changed)
        sl.addWidget(self.projector)
        reset = QPushButton("Let the planner choose everything")
        reset.setObjectName("reset_pins")
        # The projector is the user's choice, not the planner's: it stays.
        reset.clicked.connect(
            lambda: self.pins_changed.emit(
                Pins(mmproj_path=self.pins.pins().mmproj_path, mmproj_cpu=self.pins.pins().mmproj_cpu)
            )
        )
        sl.addWidget(reset, 0, Qt.AlignmentFlag.AlignLeft)
        outer.addWidget(settings_box)

        why = QGroupBox("Why these settings")
        wl = QVBoxLayout(why)
        self.reasons = QLabel()
        self.reasons.setObjectName("reasons")
        self.reasons.setWordWrap(True)
        self.reasons.setTextFormat(Qt.TextFormat.RichText)
        self.reasons.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        wl.addWidget(self.reasons)
        outer.addWidget(why)

        # The cache explained: by part at 8K-1M tokens, beside "what if" plain caches. Collapsed
        # by default; computed (a few ms, the memory model only) when shown.
        cache_box = QGroupBox("Cache by part")
        cache_box.setObjectName("cache_box")
        cl = QVBoxLayout(cache_box)
        self.cache_toggle = QToolButton()
        self.cache_toggle.setObjectName("cache_toggle")
        self.cache_toggle.setCheckable(True)
        self.cache_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.cache_toggle.setArrowType(Qt.ArrowType.RightArrow)
        # Short: a tool button does not wrap, and the panel must fit a narrow column; the rest is
        # in the tooltip.
        self.cache_toggle.setText("Show the KV cache by part")
        self.cache_toggle.setToolTip(
            "The KV cache by part at 8K-1M tokens, and what it would be if this model used MHA, GQA or MLA"
        )
        self.cache_toggle.toggled.connect(self._cache_toggled)
        cl.addWidget(self.cache_toggle)
        self.cache_table = QLabel()
        self.cache_table.setObjectName("cache_table")
        self.cache_table.setWordWrap(True)
        self.cache_table.setTextFormat(Qt.TextFormat.RichText)
        self.cache_table.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.cache_table.hide()
        # The tables are as wide as their numbers: in a narrow column they scroll sideways on their
        # own, rather than widening the whole panel.
        self.cache_scroll = QScrollArea()
        self.cache_scroll.setObjectName("cache_scroll")
        self.cache_scroll.setWidgetResizable(True)
        self.cache_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.cache_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.cache_scroll.setWidget(self.cache_table)  # which shows the label: hidden again, with its area
        self.cache_table.hide()
        self.cache_scroll.hide()
        cl.addWidget(self.cache_scroll)
        outer.addWidget(cache_box)

        alts = QGroupBox("Alternatives (double-click to use)")
        al = QVBoxLayout(alts)
        self.alternatives = QTableWidget(0, 5)
        self.alternatives.setObjectName("alternatives")
        # Generating is compared with the context full: at its start every alternative that keeps the
        # layers where they are generates at the plan's speed (context and cache type cost nothing
        # yet), which the note below says once instead of a column of equal figures.
        # The figures' headers and the memory cell take two short lines, and a change wraps at its
        # words (never elided: "16K contex…" hid which change it was), so that at the default size
        # every column fits the side panel's column beside a readable "Change".
        self.alternatives.setHorizontalHeaderLabels(ALTERNATIVE_HEADERS)
        self.alternatives.verticalHeader().hide()
        self.alternatives.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.alternatives.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.alternatives.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.alternatives.setWordWrap(True)
        self.alternatives.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.alternatives.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.alternatives.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        hdr = self.alternatives.horizontalHeader()
        hdr.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in (1, 2, 3, 4):
            hdr.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        hdr.sectionResized.connect(self._change_column_resized)
        self.alternatives.cellDoubleClicked.connect(self._alt_clicked)
        al.addWidget(self.alternatives)
        self.alternatives_note = QLabel()
        self.alternatives_note.setObjectName("alternatives_note")
        self.alternatives_note.setWordWrap(True)
        self.alternatives_note.setEnabled(False)  # greyed: a note on the table
        al.addWidget(self.alternatives_note)
        outer.addWidget(alts)

        # Inside the scrolling side panel: never squeeze a section below its natural height (the
        # panel scrolls instead).
        for box in (settings_box, why, cache_box, alts):
            box.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        outer.addStretch(1)
        # Both follow their width (eventFilter): in a narrow column the Alternatives' prompt speed
        # steps aside (each row's tooltip keeps it) rather than the table scrolling past "Fits",
        # and the cache tables' own scroll area keeps their height.
        self.alternatives.installEventFilter(self)
        self.cache_scroll.installEventFilter(self)

    # -- targets -------------------------------------------------------------------------------
    def offer_mtp_drafting(self, has_mtp_block: bool) -> None:
        """The Drafting field's choices: 'mtp' only for a model file with an MTP block."""
        mtp = " · mtp (the model's own MTP block)" if has_mtp_block else ""
        self.draft.setPlaceholderText(f"off · ngram{mtp} · a draft model's .gguf (same tokenizer, smaller)")
        self._draft_choices.setStringList(["off", "ngram", *(["mtp"] if has_mtp_block else [])])
        self.draft.setToolTip(
            "Speculative decoding: a small model of the same tokenizer drafts tokens the model checks "
            "in one batch, or 'ngram' drafts from the conversation itself"
            + (
                ", or 'mtp' drafts with the model's own multi-token-prediction block (run by llama-server: "
                "Load starts it)"
                if has_mtp_block
                else ""
            )
            + ". The plan counts the draft's memory on its device and predicts the speed-up from the "
            "acceptance measured here."
        )

    def set_rpc_hosts(self, text: str) -> None:
        """The RPC hosts kept from the last session, as typed then."""
        self.rpc_hosts.setText(text)

    def show_projector_found(self, path: Path | None, model_name: str) -> None:
        """The vision projector found beside `model_name` (None: none yet, or none fits)."""
        self.projector.set_found(path, model_name)

    def projector_path(self) -> Path | None:
        """The vision projector the user can turn on (found beside the model, or pinned), or None."""
        return self.projector.path()

    def show_projector_pins(self, pins: Pins) -> None:
        """The projector row follows pins set elsewhere (an alternative, a back-off)."""
        self.projector.show_pins(pins)

    def set_targets(self, targets: list[tuple[str, str]], current: str) -> None:
        self.target_box.clear()
        for key, label in targets:
            self.target_box.addItem(label, key)
        self.set_targets_current(current)

    def set_gpu_backends(self, choices: list[tuple[str, str]], current: str) -> None:
        """(value, label) pairs after "auto"; the row shows only when there is a choice to make."""
        self.gpu_backend.clear()
        self.gpu_backend.addItem("Auto (the vendor's own: CUDA on NVIDIA)", "auto")
        for value, label in choices:
            self.gpu_backend.addItem(label, value)
        self.gpu_backend.setCurrentIndex(max(self.gpu_backend.findData(current), 0))
        self.gpu_backend_row.setVisible(len(choices) > 1)

    def set_targets_current(self, key: str) -> None:
        i = self.target_box.findData(key)
        self.target_box.setCurrentIndex(max(i, 0))

    # -- plan ----------------------------------------------------------------------------------
    def plan(self) -> Plan | None:
        return self._plan

    def set_plan(self, plan: Plan) -> None:
        self._plan = plan
        name = plan.spec.path.name
        self.model_label.setText(f"<b>{escape(wrappable(name))}</b> · {escape(plan.target.description)}")
        self.model_label.setToolTip(str(plan.spec.path))
        t = plan.target
        self.pins.set_model(
            plan.spec.n_ctx_train, plan.spec.n_layer, t.has_gpu, t.cpu_logical_cores, bool(plan.spec.layer_expert_bytes)
        )
        self.pins.show_settings(plan.settings, plan.pins)
        self.projector.show_pins(plan.pins)
        mem = plan.memory
        bars = self._device_bar_data(plan)
        if bars:
            self.gpu_bar.set_data(bars[0])
            self.gpu_bar.show()
        else:
            self.gpu_bar.set_data(None)
            self.gpu_bar.hide()
        while len(self.device_bars) < len(bars) - 1:
            bar = MemoryBar()
            bar.setObjectName(f"device_bar_{len(self.device_bars) + 1}")
            self.device_bars.append(bar)
            self.device_bars_box.addWidget(bar)
        for i, bar in enumerate(self.device_bars):
            data = bars[i + 1] if i + 1 < len(bars) else None
            bar.set_data(data)
            bar.setVisible(data is not None)
        self.ram_bar.set_data(BarData("RAM", mem.host, plan.host_budget_bytes, server=mem.server))
        s = plan.settings
        n_dev = len(t.gpus)
        rpc = sum(1 for g in t.gpus if g.kind == "rpc")
        on = (
            ("on the GPU" if n_dev == 1 else f"on {n_dev} devices")
            if not rpc
            else (
                f"across {rpc} RPC host{'s' if rpc > 1 else ''}" + (f" and {n_dev - rpc} GPU(s)" if n_dev > rpc else "")
            )
        )
        if s.n_cpu_moe and t.has_gpu:
            on += f", experts of {min(s.n_cpu_moe, plan.spec.n_layer)} layers in RAM"
        where = (
            on
            if t.has_gpu and s.n_gpu_layers > plan.spec.n_layer
            else (f"{s.n_gpu_layers} of {plan.spec.n_layer + 1} layers {on}" if t.has_gpu else "on the CPU")
        )
        if plan.fits:
            color, word = OK_GREEN, "Fits"
        else:
            color, word = OVER_BUDGET, "Does not fit"
        detail = (
            escape(wrappable(plan.refused))
            if plan.refused
            # What fills the context before the chat does: the enabled tools' schemas.
            else escape(f"{format_tokens(s.n_ctx)} context{_tools_split(plan)}, {where}")
        )
        self.verdict.setText(f"<b style='color:{color}'>{word}</b> · {detail}")
        self.placement.setText(_placement_html(plan))
        self.placement.setVisible(t.has_gpu)
        self.speed.setText(_speed_text(plan, self._measuring))
        self.draft_info.setText(_draft_text(plan))
        self.draft_info.setVisible(plan.draft is not None)
        styles = {REASON: "", WARNING: f" style='color:{WARN_AMBER}'", SUGGESTION: f" style='color:{OVER_BUDGET}'"}
        items = [f"<li{styles[w.kind]}>{escape(w.text)}</li>" for w in why_lines(plan)]
        self.reasons.setText("<ul style='margin-left:-20px'>" + "".join(items) + "</ul>")
        self._show_alternatives(plan)
        self._show_cache_table()
        self.load_button.setText("Load" if plan.fits else "Load anyway…")

    def _projector_changed(self, path: object, cpu: bool) -> None:
        pins = replace(self.pins.pins(), mmproj_path=str(path) if path else None, mmproj_cpu=True if cpu else None)
        self.pins_changed.emit(pins)

    def _cache_toggled(self, shown: bool) -> None:
        self.cache_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.cache_table.setVisible(shown)
        self.cache_scroll.setVisible(shown)
        self._show_cache_table()

    def _show_cache_table(self) -> None:
        if self._plan is None or not self.cache_toggle.isChecked():
            return
        if is_routed(self._plan.spec.architecture):
            self.cache_table.setText("Counting the cache with llama.cpp…")
            self._fit_cache_height()
            self.cache_count_requested.emit(self._plan)
            return
        self.show_cache_table(self._plan, cache_table(self._plan.spec, self._plan.settings))

    def show_cache_table(self, plan: Plan, table: CacheTable) -> None:
        """The cache by part for `plan`, unless a newer plan is shown or the section was closed."""
        if plan is self._plan and self.cache_toggle.isChecked():
            self.cache_table.setText(_cache_html(table))
            self._fit_cache_height()

    def _fit_cache_height(self) -> None:
        """The cache tables' own scroll area as tall as the tables at the width they get, plus its
        scroll bar when they are wider than the column."""
        label, area = self.cache_table, self.cache_scroll
        table_width = label.minimumSizeHint().width()
        height = label.heightForWidth(max(area.viewport().width(), table_width))
        bar = area.horizontalScrollBar().sizeHint().height() if table_width > area.viewport().width() else 0
        area.setFixedHeight((height if height > 0 else label.sizeHint().height()) + bar)

    @staticmethod
    def _device_bar_data(plan: Plan) -> list[BarData]:
        """The GPU bar, or with several devices one bar each, against its own budget."""
        t, mem = plan.target, plan.memory
        if not t.has_gpu:
            return []
        if len(mem.per_device) <= 1 and not any(g.kind == "rpc" for g in t.gpus):
            return [BarData("GPU", mem.device, plan.device_budget_bytes)]
        return [
            BarData(g.llama_name or g.name, c, g.memory_budget_bytes)
            for g, c in zip(t.gpus, mem.per_device, strict=False)
        ]

    def _show_alternatives(self, plan: Plan) -> None:
        rows = alternative_rows(plan)
        self.alternatives.setRowCount(len(rows))
        start = format_count(plan.speed.decode_tps, 1)
        same_start = all(format_count(a.speed.decode_tps, 1) == start for a in rows)
        self.alternatives_note.setText(
            "Full ctx t/s: generating with the context full. At the start of a conversation "
            + (
                f"every alternative generates {start} tokens/s, as the plan does."
                if same_start
                else f"the plan generates {start} tokens/s; each row's tooltip has its own."
            )
        )
        self.alternatives_note.setVisible(bool(rows))
        for i, a in enumerate(rows):
            cells = [
                a.label,
                f"{format_bytes(a.memory_total_bytes)}\n{_signed_bytes(a.memory_delta_bytes)}",
                format_count(a.speed.decode_tps_full_ctx, 1),
                format_count(a.speed.prefill_tps),
                {FITS: "yes", TOO_BIG: "no"}.get(a.verdict, a.verdict),
            ]
            memory = f"{format_bytes(a.memory_total_bytes)} ({_signed_bytes(a.memory_delta_bytes)})"
            summary = (
                f"{a.label}: {memory}, {format_count(a.speed.decode_tps, 1)} tokens/s generating at the start "
                f"and {cells[2]} with the context full, {cells[3]} tokens/s reading a prompt, fits: {cells[4]}"
            )
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(summary)
                if c in (1, 2, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if c == 4:
                    item.setForeground(QColor(OK_GREEN if a.verdict == FITS else OVER_BUDGET))
                if a.refused:
                    item.setToolTip(f"{summary}\n{a.refused}")
                self.alternatives.setItem(i, c, item)
        self._fit_alternative_columns()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.alternatives and event.type() == QEvent.Type.Resize:
            self._fit_alternative_columns()
        elif watched is self.cache_scroll and event.type() == QEvent.Type.Resize:
            self._fit_cache_height()
        return super().eventFilter(watched, event)

    def _fit_alternative_columns(self) -> None:
        """Show the prompt speed column only where every column fits beside a readable "Change"."""
        table, hdr = self.alternatives, self.alternatives.horizontalHeader()
        table.setColumnHidden(PROMPT_COLUMN, False)
        need = self.fontMetrics().averageCharWidth() * CHANGE_MIN_CHARS + sum(
            max(hdr.sectionSizeHint(c), table.sizeHintForColumn(c)) for c in range(1, table.columnCount())
        )
        table.setColumnHidden(PROMPT_COLUMN, need > table.viewport().width())
        self._fit_alternative_rows()

    def _change_column_resized(self, column: int, _old: int, _new: int) -> None:
        if column == 0:
            self._fit_alternative_rows()

    def _fit_alternative_rows(self) -> None:
        """The table as tall as its rows, wrapped at the width "Change" got (it never scrolls: the
        panel does). Also on each resize of that column, which the header makes after the table's."""
        table = self.alternatives
        table.resizeRowsToContents()
        rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
        table.setFixedHeight(table.horizontalHeader().sizeHint().height() + rows + 2 * table.frameWidth())

    def _alt_clicked(self, row: int, _col: int) -> None:
        if self._plan is not None and 0 <= row < len(self._plan.alternatives):
            alt: Alternative = self._plan.alternatives[row]
            self.alternative_chosen.emit(alt)

    # -- load state ----------------------------------------------------------------------------
    def show_planning(self, model_name: str) -> None:
        self.model_label.setText(f"<b>{escape(wrappable(model_name))}</b> · planning…")
        self.load_button.setEnabled(False)
        self.load_button.setToolTip("Planning…")

    def show_message(self, text: str) -> None:
        """A line where the verdict goes: why there is no plan (unreadable model, planning failed)."""
        self.verdict.setText(f"<span style='color:{OVER_BUDGET}'>{escape(wrappable(text))}</span>")

    def show_loading(self, value: float | None) -> None:
        """The progress bar and Cancel while loading (value 0..1); None hides them.

        Kept as a state of its own rather than read back from visibility: on a hidden tab every
        child reports invisible, and a finished load must still swap Cancel back for Load.
        """
        loading = value is not None
        if loading:
            # Before showing: QProgressBar.setValue repaints at once when visible, and during the
            # show that would repaint the whole re-laid-out panel synchronously.
            self.progress.setValue(int(100 * (value or 0.0)))
        if self._loading != loading:
            self._loading = loading
            self.progress.setVisible(loading)
            self.cancel_button.setVisible(loading)
            self.load_button.setVisible(not loading)

    def set_measuring(self, text: str) -> None:
        """The speed probe runs (`text`: what and why) or has ended (""): said beside the prediction,
        which keeps its figures until the probe's arrive."""
        self._measuring = text
        if self._plan is not None:
            self.speed.setText(_speed_text(self._plan, text))

    def show_load_state(self, state: str, text: str, *, can_load: bool, why: str = "", reload: bool = False) -> None:
        """`state`: "unloaded", "loading" or "loaded"; `text` the line under the buttons."""
        self.load_status.setText(wrappable(text))
        self.load_button.setEnabled(can_load)
        self.load_button.setToolTip(why)
        self.unload_button.setEnabled(state == "loaded")
        if state == "loaded":
            self.load_button.setText("Reload" if reload else "Load")
        elif self._plan is not None:
            self.load_button.setText("Load" if self._plan.fits else "Load anyway…")


def _placement_html(plan: Plan) -> str:
    """Where the model runs, and for a MoE file how many layers' experts are in RAM and whether
    the planner chose that or the user pinned it."""
    s = plan.settings
    text = placement_text(plan.spec, s, plan.memory)
    flags = f" (--n-cpu-moe {s.n_cpu_moe})" if s.n_cpu_moe else ""
    pinned = plan.pins.n_cpu_moe is not None or plan.pins.cpu_experts is not None
    who = "pinned by you" if pinned else "chosen by the planner"
    if not plan.spec.layer_expert_bytes:
        who = ""
    return f"Placement: <b>{escape(text)}</b>{escape(flags)}" + (
        f" <span style='color:gray'>({who})</span>" if who else ""
    )


def _tools_split(plan: Plan) -> str:
    split = plan.context_budget.text()
    return f" ({split})" if split else ""


def _speed_text(plan: Plan, measuring: str = "") -> str:
    """Predicted speed, where it comes from (and the probe's state while it runs), and the last
    reply's measurement beside its prediction."""
    sp, s = plan.speed, plan.settings
    probe = plan.target.host_probe
    on_cpu = not (plan.target.has_gpu and s.n_gpu_layers > 0)
    if on_cpu:
        basis = f"CPU measured {probe.date}" if probe is not None else "CPU rates assumed (not measured yet)"
    else:
        measured = [g.measured for g in plan.target.gpus if g.measured is not None]
        basis = (
            f"GPU measured {measured[0].date}"
            if len(measured) == len(plan.target.gpus)
            else "GPU bandwidth efficiency assumed"
        )
    if sp.calibration_replies:
        basis += f", corrected by {sp.calibration_replies} repl{'y' if sp.calibration_replies == 1 else 'ies'}"
        basis += " of this model" if sp.calibration_model else " on this machine"
    if measuring and on_cpu:
        basis = f"{'CPU rates assumed' if probe is None else basis}, {measuring}"
    lines = [
        f"Predicted: <b>{format_count(sp.decode_tps, 1)}</b> tokens/s generating "
        f"({format_count(sp.decode_tps_full_ctx, 1)} with the context full), {format_count(sp.prefill_tps)} tokens/s "
        f"reading a {prompt_tokens(plan)}-token prompt ({format_count(sp.prefill_tps_full_ctx)} filling the context) <span style='color:gray'>({escape(basis)})</span>"
    ]
    last = last_measured(plan)
    if last is not None:
        lines.append(
            f"Last measured: <b>{last.decode_tps}</b> tokens/s generating (predicted "
            f"{last.predicted_decode_tps} at its {last.context_tokens}-token context), {last.prefill_tps} "
            f"reading its {last.prompt_tokens}-token prompt (predicted {last.predicted_prefill_tps})"
            + (
                f" <span style='color:gray'>(not learned from: {escape(last.set_aside)})</span>"
                if last.set_aside
                else ""
            )
        )
    return "<br>".join(lines)


def _draft_text(plan: Plan) -> str:
    """The draft's bytes per device and the speed-up the plan predicts (planner/search/draft.py)."""
    d = plan.draft
    if d is None:
        return ""
    where = ", ".join(f"{escape(name)} {format_bytes(n)}" for name, n in d.bytes_by_device().items())
    if d.spec is not None:
        head = f"<b>Draft</b> {escape(wrappable(d.spec.path.name))} · {where}"
    elif d.kind == "mtp":
        head = f"<b>MTP drafting</b> (the model's own block, in llama-server) · its context {where}"
    else:
        head = "<b>N-gram drafting</b> · no draft model, no memory"
    acc = d.acceptance
    source = f"measured over {acc.replies} replies" if acc.measured else "assumed until replies measure it"
    color = OK_GREEN if d.speedup >= 1.0 else WARN_AMBER
    return (
        f"{head}<br>{d.n_draft} token{'s' if d.n_draft != 1 else ''} per step · acceptance {acc.p:.0%} ({source}) · "
        f"<b style='color:{color}'>{d.speedup:.2f}x</b> decoding predicted ({d.decode_tps:.1f} tok/s)"
    )


def _cache_html(table: CacheTable) -> str:
    """Two tables: this model's cache by part, then the labelled "what if" caches and assumptions."""

    td = "<td align='right' style='padding:0 6px'>"
    th = "<th align='right' style='padding:0 6px'>"
    names = [name for name, _ in table.rows[0].parts] if table.rows else []
    kinds = [name for name, _ in table.rows[0].what_if] if table.rows else []
    parts = [f"<tr>{th}tokens</th>" + "".join(f"{th}{escape(n)}</th>" for n in names) + f"{th}total</th></tr>"]
    for r in table.rows:
        cells = "".join(f"{td}{format_bytes(b)}</td>" for _, b in r.parts)
        parts.append(f"<tr>{td}{tokens_label(r.n_ctx)}</td>{cells}{td}<b>{format_bytes(r.total_bytes)}</b></td></tr>")
    what = [f"<tr>{th}tokens</th>{th}this model</th>" + "".join(f"{th}{k}</th>" for k in kinds) + "</tr>"]
    for r in table.rows:
        cells = "".join(
            f"{td}{format_bytes(b)} ({100.0 * r.total_bytes / b if b else 0.0:.1f}%)</td>" for _, b in r.what_if
        )
        what.append(f"<tr>{td}{tokens_label(r.n_ctx)}</td>{td}{format_bytes(r.total_bytes)}</td>{cells}</tr>")
    notes = "".join(f"<li>{escape(a)}</li>" for a in table.assumptions)
    return (
        f"<p>This model, K {escape(table.type_k)} / V {escape(table.type_v)}, {escape(table.source_text)}:</p>"
        f"<table>{''.join(parts)}</table>"
        "<p><b>What if</b> this model had a plain cache (<i>not</i> its cache: same layers, f16 K and V; "
        "in brackets this model's share):</p>"
        f"<table>{''.join(what)}</table>"
        f"<ul style='margin-left:-20px; color:gray'>{notes}</ul>"
    )


def _narrow_combo(box: QComboBox) -> None:
    """A combo box as narrow as its column needs: by default its minimum width is its longest
    item's ("Auto (the vendor's own: CUDA on NVIDIA)", a profile's name), which widened the whole
    panel; a longer item is cut in the box and shown whole in its list."""
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(12)


def _is_windows() -> bool:
    return sys.platform == "win32"
