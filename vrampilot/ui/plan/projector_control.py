"""The Plan panel's vision projector row: on or off, which file (the one beside the model that fits
it, found as `--mmproj auto` finds it), and whether it stays on the CPU.

It is a choice of the user's, not the planner's: the projector is kept in the pins (Pins.mmproj_path,
mmproj_cpu), so it is remembered per model and "let the planner choose everything" keeps it.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from vrampilot.planner.plan import Pins


class ProjectorControl(QWidget):
    # (the projector's path, or None for none; keep it on the CPU)
    changed = Signal(object, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._found: Path | None = None
        self._pinned: Path | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.on = QCheckBox("Vision projector")
        self.on.setObjectName("mmproj_on")
        self.on.setToolTip(
            "Load the model's vision projector (mmproj) with it, so the chat can show the model images; "
            "its weights and compute buffer are planned on the device llama.cpp puts them on."
        )
        self.on.toggled.connect(self._user_changed)
        row.addWidget(self.on)
        self.cpu = QCheckBox("keep on CPU")
        self.cpu.setObjectName("mmproj_cpu")
        self.cpu.setToolTip(
            "Keep the projector in system RAM and run it on the CPU (llama.cpp's --no-mmproj-offload): "
            "no VRAM for it, slower to read an image."
        )
        self.cpu.toggled.connect(self._user_changed)
        row.addWidget(self.cpu)
        row.addStretch(1)
        lay.addLayout(row)
        self.file = QLabel()
        self.file.setObjectName("mmproj_file")
        self.file.setWordWrap(True)
        self.file.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # A file name is one word to Qt's line breaking: without a minimum of its own, a long one
        # set the side panel's width. It may be cut instead; the tooltip has the whole path.
        self.file.setMinimumWidth(self.fontMetrics().averageCharWidth() * 20)
        lay.addWidget(self.file)
        self.set_found(None, "")

    def path(self) -> Path | None:
        """The projector the control would plan with: the one pinned, else the one found."""
        return self._pinned or self._found

    def set_found(self, found: Path | None, model_name: str) -> None:
        """The projector beside the model that fits it (None: there is none)."""
        self._found = found
        self._model_name = model_name
        self._refresh()

    def show_pins(self, pins: Pins) -> None:
        """Show what the plan has (without emitting `changed`)."""
        self._pinned = Path(pins.mmproj_path) if pins.mmproj_path else None
        for box, value in ((self.on, self._pinned is not None), (self.cpu, bool(pins.mmproj_cpu))):
            box.blockSignals(True)
            box.setChecked(value)
            box.blockSignals(False)
        self._refresh()

    def _refresh(self) -> None:
        path = self.path()
        self.on.setEnabled(path is not None)
        self.cpu.setEnabled(self.on.isChecked())
        if self._pinned is not None:
            self.file.setText(f"{self._pinned.name}" + ("" if self._pinned.is_file() else " (the file is missing)"))
            self.file.setToolTip(str(self._pinned))
        elif self._found is not None:
            self.file.setText(f"{self._found.name} beside the model fits it")
            self.file.setToolTip(str(self._found))
        else:
            name = self._model_name or "the model"
            self.file.setText(
                f"No vision projector (mmproj*.gguf) beside {name} fits it; the Hub tab downloads one with a "
                "vision model."
            )
            self.file.setToolTip("")

    def _user_changed(self, _checked: bool) -> None:
        on = self.on.isChecked()
        self.cpu.setEnabled(on)
        self.changed.emit(self.path() if on else None, on and self.cpu.isChecked())
