"""One control per setting the user can pin. Each row shows the plan's choice while on "auto";
touching the control pins it, pressing "auto" gives the choice back to the planner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSlider,
    QSpinBox,
    QToolButton,
    QWidget,
)

from vrampilot.planner.plan import MAX_CTX, Pins
from vrampilot.planner.settings import KV_CACHE_TYPES, Settings
from vrampilot.units import format_tokens

BATCH_CHOICES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
UBATCH_CHOICES = (32, 64, 128, 256, 512, 1024, 2048, 4096)


PINNED_TEXT = "pinned ×"


def context_steps(n_ctx_train: int) -> list[int]:
    """Slider stops: powers of two from 512 past the trained length, and the trained length (when
    llama.cpp can take it: a file may claim any number there)."""
    top = max(8192, min(1 << 20, 2 * max(n_ctx_train, 1)))
    steps = {512 << i for i in range(12) if (512 << i) <= top}
    if 0 < n_ctx_train <= MAX_CTX:
        steps.add(n_ctx_train)
    return sorted(steps)


class PinControls(QWidget):
    """Emits `pins_changed(Pins)` whenever the user pins or unpins a setting."""

    pins_changed = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pins = Pins()
        self._ctx_steps: list[int] = context_steps(8192)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setColumnStretch(1, 1)
        self._auto: dict[str, QToolButton] = {}
        self._labels: dict[str, QLabel] = {}
        self._row = 0

        self.ctx_slider = QSlider(Qt.Orientation.Horizontal)
        self.ctx_slider.setObjectName("pin_n_ctx")
        self.ctx_slider.setRange(0, len(self._ctx_steps) - 1)
        self.ctx_slider.setPageStep(1)
        self.ctx_value = QLabel()
        self.ctx_value.setMinimumWidth(self.fontMetrics().horizontalAdvance("1024K "))
        ctx_box = QWidget()
        h = QHBoxLayout(ctx_box)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(self.ctx_slider, 1)
        h.addWidget(self.ctx_value)
        self._add("n_ctx", "Context", ctx_box)
        self.ctx_slider.valueChanged.connect(self._ctx_moved)

        self.type_k = self._combo("type_k", KV_CACHE_TYPES)
        self._add("type_k", "K cache", self.type_k)
        self.type_v = self._combo("type_v", KV_CACHE_TYPES)
        self._add("type_v", "V cache", self.type_v)

        self.ngl = QSpinBox()
        self.ngl.setObjectName("pin_n_gpu_layers")
        self.ngl.setRange(0, 1000)
        self._add("n_gpu_layers", "GPU layers", self.ngl)
        self.ngl.valueChanged.connect(lambda v: self._user_set("n_gpu_layers", int(v)))

        # A MoE file's routed experts: how many leading layers keep theirs in RAM (--n-cpu-moe).
        self.n_cpu_moe = QSpinBox()
        self.n_cpu_moe.setObjectName("pin_n_cpu_moe")
        self.n_cpu_moe.setRange(0, 1000)
        self.n_cpu_moe.setSuffix(" layers")
        self.n_cpu_moe.setToolTip(
            "Routed experts of the first N layers stay in RAM (llama.cpp's --n-cpu-moe); every layer's "
            "attention and KV cache stay on the GPU. Auto: as few as fit."
        )
        self._add("n_cpu_moe", "Experts in RAM", self.n_cpu_moe)
        self.n_cpu_moe.valueChanged.connect(lambda v: self._user_set("n_cpu_moe", int(v)))

        self.batch = self._combo("n_batch", [str(b) for b in BATCH_CHOICES])
        self._add("n_batch", "Batch", self.batch)
        self.ubatch = self._combo("n_ubatch", [str(b) for b in UBATCH_CHOICES])
        self._add("n_ubatch", "Micro-batch", self.ubatch)

        self.threads = QSpinBox()
        self.threads.setObjectName("pin_n_threads")
        self.threads.setRange(1, 512)
        self._add("n_threads", "Threads", self.threads)
        self.threads.valueChanged.connect(lambda v: self._user_set("n_threads", int(v)))
        self.threads_batch = QSpinBox()
        self.threads_batch.setObjectName("pin_n_threads_batch")
        self.threads_batch.setRange(1, 512)
        self._add("n_threads_batch", "Prompt threads", self.threads_batch)
        self.threads_batch.valueChanged.connect(lambda v: self._user_set("n_threads_batch", int(v)))

        self.flash = self._combo("flash_attn", ["on", "off"])
        self._add("flash_attn", "Flash attention", self.flash)

    # -- building ------------------------------------------------------------------------------
    def _combo(self, name: str, items: Sequence[str]) -> QComboBox:
        box = QComboBox()
        box.setObjectName(f"pin_{name}")
        box.addItems(list(items))
        box.activated.connect(lambda _i, n=name, b=box: self._combo_chosen(n, b.currentText()))
        return box

    def _add(self, name: str, label: str, control: QWidget) -> None:
        grid: QGridLayout = self.layout()  # type: ignore[assignment]  # the layout this widget set in __init__ is a QGridLayout
        lab = QLabel(label)
        lab.setBuddy(control)
        auto = QToolButton()
        auto.setObjectName(f"auto_{name}")
        auto.setCheckable(True)
        # Wide enough for either word, so pinning does not shift the row.
        auto.setMinimumWidth(auto.fontMetrics().horizontalAdvance(PINNED_TEXT) + 16)
        auto.toggled.connect(lambda checked, n=name: self._show_pinned(n, not checked))
        auto.setChecked(True)
        auto.clicked.connect(lambda checked, n=name: self._auto_clicked(n, checked))
        grid.addWidget(lab, self._row, 0)
        grid.addWidget(control, self._row, 1)
        grid.addWidget(auto, self._row, 2)
        self._auto[name] = auto
        self._labels[name] = lab
        self._row += 1
        self._show_pinned(name, False)

    def _show_pinned(self, name: str, pinned: bool) -> None:
        """A pinned row looks pinned: its label bold, its button saying so (the reasons text alone
        was the only sign, and pins are remembered per model)."""
        auto, lab = self._auto.get(name), self._labels.get(name)
        if auto is None or lab is None:
            return
        auto.setText(PINNED_TEXT if pinned else "auto")
        auto.setToolTip(
            "Pinned by you, and remembered for this model. Press to give it back to the planner."
            if pinned
            else "The planner chooses. Change the value to pin it."
        )
        font = lab.font()
        font.setBold(pinned)
        lab.setFont(font)

    # -- user actions --------------------------------------------------------------------------
    def _ctx_moved(self, index: int) -> None:
        value = self._ctx_steps[max(0, min(index, len(self._ctx_steps) - 1))]
        self.ctx_value.setText(format_tokens(value))
        self._user_set("n_ctx", value)

    def _combo_chosen(self, name: str, text: str) -> None:
        value: object
        if name == "flash_attn":
            value = text == "on"
        elif name in ("n_batch", "n_ubatch"):
            value = int(text)
        else:
            value = text
        self._user_set(name, value)

    def _user_set(self, name: str, value: object) -> None:
        if getattr(self._pins, name) == value and not self._auto[name].isChecked():
            return
        self._pins = replace(self._pins, **{name: value})  # type: ignore[arg-type]  # name and value from one control
        self._auto[name].setChecked(False)
        self.pins_changed.emit(self._pins)

    def _auto_clicked(self, name: str, checked: bool) -> None:
        if checked:
            self._pins = replace(self._pins, **{name: None})
            self.pins_changed.emit(self._pins)
        else:
            # Unchecking "auto" without a value means: keep what the plan shows, pinned.
            self._auto[name].setChecked(True)

    # -- showing a plan ------------------------------------------------------------------------
    def pins(self) -> Pins:
        return self._pins

    def set_model(
        self, n_ctx_train: int, n_layer: int, has_gpu: bool, logical_cores: int, has_experts: bool = False
    ) -> None:
        self._ctx_steps = context_steps(n_ctx_train)
        self.ctx_slider.blockSignals(True)
        self.ctx_slider.setRange(0, len(self._ctx_steps) - 1)
        self.ctx_slider.blockSignals(False)
        self.ngl.blockSignals(True)
        self.ngl.setRange(0, n_layer + 1)
        self.ngl.blockSignals(False)
        self.ngl.setEnabled(has_gpu)
        self._auto["n_gpu_layers"].setEnabled(has_gpu)
        self.ngl.setToolTip("" if has_gpu else "No GPU in this plan: every layer runs on the CPU")
        self.n_cpu_moe.blockSignals(True)
        self.n_cpu_moe.setRange(0, n_layer)
        self.n_cpu_moe.setSuffix(f" of {n_layer} layers")
        self.n_cpu_moe.blockSignals(False)
        moe = has_gpu and has_experts
        self.n_cpu_moe.setEnabled(moe)
        self._auto["n_cpu_moe"].setEnabled(moe)
        # A dense model has no experts to place: the row is not shown at all (as peers show MoE
        # options only for MoE models); without a GPU it stays, greyed, saying why.
        for w in (self._labels["n_cpu_moe"], self.n_cpu_moe, self._auto["n_cpu_moe"]):
            w.setVisible(has_experts)
        if not moe:
            self.n_cpu_moe.setToolTip(
                "No routed experts in this model" if has_gpu else "No GPU in this plan: everything is in RAM"
            )
        for box in (self.threads, self.threads_batch):
            box.blockSignals(True)
            box.setRange(1, max(1, logical_cores))
            box.blockSignals(False)

    def show_settings(self, settings: Settings, pins: Pins) -> None:
        """Show the plan's values; rows the user pinned stay pinned."""
        self._pins = pins
        for name, auto in self._auto.items():
            auto.setChecked(getattr(pins, name) is None)
        widgets = (
            self.ctx_slider,
            self.type_k,
            self.type_v,
            self.ngl,
            self.n_cpu_moe,
            self.batch,
            self.ubatch,
            self.threads,
            self.threads_batch,
            self.flash,
        )
        for w in widgets:
            w.blockSignals(True)
        try:
            if settings.n_ctx not in self._ctx_steps:
                self._ctx_steps = sorted({*self._ctx_steps, settings.n_ctx})
                self.ctx_slider.setRange(0, len(self._ctx_steps) - 1)
            self.ctx_slider.setValue(self._ctx_steps.index(settings.n_ctx))
            self.ctx_value.setText(format_tokens(settings.n_ctx))
            self.type_k.setCurrentText(settings.type_k)
            self.type_v.setCurrentText(settings.type_v)
            self.ngl.setValue(settings.n_gpu_layers)
            self.n_cpu_moe.setValue(settings.n_cpu_moe)
            _set_number(self.batch, settings.n_batch)
            _set_number(self.ubatch, settings.n_ubatch)
            self.threads.setValue(settings.n_threads)
            self.threads_batch.setValue(settings.n_threads_batch)
            self.flash.setCurrentText("on" if settings.flash_attn else "off")
        finally:
            for w in widgets:
                w.blockSignals(False)


def _set_number(box: QComboBox, value: int) -> None:
    text = str(value)
    if box.findText(text) < 0:
        box.addItem(text)
    box.setCurrentText(text)
