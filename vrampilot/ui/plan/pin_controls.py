"""One control per setting the user can pin, a row per knob of the table that gives it one
(planner/knobs.py: label, control, choices). Each row shows the plan's choice while on "auto";
touching the control pins it, pressing "auto" gives the choice back to the planner."""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

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

from vrampilot.planner.knobs import KNOBS, Knob
from vrampilot.planner.plan import MAX_CTX, Pins
from vrampilot.planner.settings import Settings
from vrampilot.units import format_tokens

PINNED_TEXT = "pinned ×"


def context_steps(n_ctx_train: int) -> list[int]:
    """Slider stops: powers of two from 512 past the trained length, and the trained length (when
    llama.cpp can take it: a file may claim any number there)."""
    top = max(8192, min(1 << 20, 2 * max(n_ctx_train, 1)))
    steps = {512 << i for i in range(12) if (512 << i) <= top}
    if 0 < n_ctx_train <= MAX_CTX:
        steps.add(n_ctx_train)
    return sorted(steps)


_W = TypeVar("_W", bound=QWidget)


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

        # One row per knob the table gives a Plan panel row (planner/knobs.py), in its order.
        self._controls: dict[str, QWidget] = {}
        for k in KNOBS:
            if k.panel is None:
                continue
            if k.panel.control == "slider":
                control = self._context_row()
            elif k.panel.control == "combo":
                control = self._combo(k)
            else:
                control = self._spin(k)
            control.setToolTip(k.panel.tooltip)
            self._controls[k.field] = control
            self._add(k.field, k.panel.label, control)
        # The rows set_model and show_settings treat by name (tests reach them too).
        self.type_k = self._control("type_k", QComboBox)
        self.ngl = self._control("n_gpu_layers", QSpinBox)
        self.n_cpu_moe = self._control("n_cpu_moe", QSpinBox)
        self.n_cpu_moe.setSuffix(" layers")
        self.threads = self._control("n_threads", QSpinBox)
        self.threads_batch = self._control("n_threads_batch", QSpinBox)

    # -- building ------------------------------------------------------------------------------
    def _context_row(self) -> QWidget:
        self.ctx_slider = QSlider(Qt.Orientation.Horizontal)
        self.ctx_slider.setObjectName("pin_n_ctx")
        self.ctx_slider.setRange(0, len(self._ctx_steps) - 1)
        self.ctx_slider.setPageStep(1)
        self.ctx_value = QLabel()
        self.ctx_value.setMinimumWidth(self.fontMetrics().horizontalAdvance("1024K "))
        box = QWidget()
        h = QHBoxLayout(box)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(self.ctx_slider, 1)
        h.addWidget(self.ctx_value)
        self.ctx_slider.valueChanged.connect(self._ctx_moved)
        return box

    def _combo(self, k: Knob) -> QComboBox:
        assert k.panel is not None
        box = QComboBox()
        box.setObjectName(f"pin_{k.field}")
        box.addItems(list(k.panel.choices))
        box.activated.connect(lambda _i, b=box: self._user_set(k.field, k.panel_value(b.currentText())))
        return box

    def _spin(self, k: Knob) -> QSpinBox:
        assert k.panel is not None
        box = QSpinBox()
        box.setObjectName(f"pin_{k.field}")
        box.setRange(k.panel.minimum, 1000)
        box.valueChanged.connect(lambda v: self._user_set(k.field, int(v)))
        return box

    def _control(self, field: str, kind: type[_W]) -> _W:
        control = self._controls[field]
        assert isinstance(control, kind)
        return control

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
        widgets = [self.ctx_slider, *self._controls.values()]
        for w in widgets:
            w.blockSignals(True)
        try:
            if settings.n_ctx not in self._ctx_steps:
                self._ctx_steps = sorted({*self._ctx_steps, settings.n_ctx})
                self.ctx_slider.setRange(0, len(self._ctx_steps) - 1)
            self.ctx_slider.setValue(self._ctx_steps.index(settings.n_ctx))
            self.ctx_value.setText(format_tokens(settings.n_ctx))
            for k in KNOBS:
                control = self._controls.get(k.field)
                if isinstance(control, QComboBox):
                    _set_text(control, k.panel_text(getattr(settings, k.field)))
                elif isinstance(control, QSpinBox):
                    control.setValue(int(getattr(settings, k.field)))
        finally:
            for w in widgets:
                w.blockSignals(False)


def _set_text(box: QComboBox, text: str) -> None:
    """Show `text`, a value the plan chose that the list may lack (a batch size of its own)."""
    if box.findText(text) < 0:
        box.addItem(text)
    box.setCurrentText(text)
