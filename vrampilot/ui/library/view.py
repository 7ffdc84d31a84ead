"""The model library: the embedded model, files the user opened or dropped, folders' contents.

Each entry shows what a user picks a model by: architecture, size, quantization, trained context,
and whether it fits this machine (from the planner, computed off the GUI thread). A model with
settings the user pinned (remembered per model) says "pinned" beside its name, its tooltip listing
them, so a plan that differs from the defaults is no surprise when the model is picked again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QMenu,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vrampilot.gguf import GGUFError, ModelSpec, load_model_spec, one_line
from vrampilot.planner.errors import PlanError
from vrampilot.planner.fit import FIT_LABELS, Fit, classify_fit
from vrampilot.planner.knobs import pinned_labels
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import Target
from vrampilot.ui.theme import OK_GREEN, OVER_BUDGET, WARN_AMBER
from vrampilot.units import format_bytes, format_tokens

BADGE_COLORS = {
    FIT_LABELS[Fit.GPU]: OK_GREEN,
    FIT_LABELS[Fit.CPU]: OK_GREEN,
    FIT_LABELS[Fit.PARTIAL]: WARN_AMBER,
    FIT_LABELS[Fit.TOO_LARGE]: OVER_BUDGET,
}
UNREADABLE = "Unreadable"
PINNED_MARK = " · pinned"


@dataclass(frozen=True)
class LibraryEntry:
    path: Path
    embedded: bool
    spec: ModelSpec | None
    badge: str  # a FIT_LABELS value (vrampilot.planner.fit), or UNREADABLE
    error: str = ""


def describe_entry(path: Path, target: Target, *, embedded: bool = False) -> LibraryEntry:
    """Read the header and ask the planner whether it fits (runs on a worker thread)."""
    try:
        spec = load_model_spec(path)
    except GGUFError as exc:
        # The problem alone: the row names the file above it, and the path before the reason
        # filled the row's second line, elided in the middle over the reason (the tooltip has both).
        return LibraryEntry(path, embedded, None, UNREADABLE, exc.problem)
    except OSError as exc:
        return LibraryEntry(path, embedded, None, UNREADABLE, str(exc))
    try:
        p = plan(spec, target, alternatives=False)
    except PlanError as exc:
        return LibraryEntry(path, embedded, spec, UNREADABLE, str(exc))
    return LibraryEntry(path, embedded, spec, FIT_LABELS[classify_fit(p)])


class LibraryView(QWidget):
    model_selected = Signal(object)  # Path
    # A row whose file could not be read: selectable (to remove it) but never planned; the
    # controller reads it again, in case it was fixed or replaced since it was listed.
    unreadable_selected = Signal(object)  # LibraryEntry
    open_files_requested = Signal()
    add_folder_requested = Signal()
    remove_requested = Signal(object)  # Path

    COLUMNS = ("Model", "On this machine")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.tree = QTreeWidget()
        self.tree.setObjectName("library")
        self.tree.setRootIsDecorated(False)
        self.tree.setColumnCount(len(self.COLUMNS))
        self.tree.setHeaderLabels(list(self.COLUMNS))
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        hdr = self.tree.header()
        hdr.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        hdr.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        hdr.setStretchLastSection(False)
        self.tree.setWordWrap(False)
        self.tree.setUniformRowHeights(False)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.tree.setMinimumHeight(self.fontMetrics().height() * 6)
        self.tree.itemSelectionChanged.connect(self._selected)
        # Remove also from the row's context menu and with the Delete key.
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        delete = QShortcut(QKeySequence(QKeySequence.StandardKey.Delete), self.tree)
        delete.setContext(Qt.ShortcutContext.WidgetShortcut)
        delete.activated.connect(self._remove)
        lay.addWidget(self.tree)
        row = QHBoxLayout()
        open_b = QPushButton("Open GGUF…")
        open_b.setObjectName("open_model")
        open_b.clicked.connect(self.open_files_requested)
        folder_b = QPushButton("Add folder…")
        folder_b.setObjectName("add_folder")
        folder_b.clicked.connect(self.add_folder_requested)
        self.remove_b = QPushButton("Remove")
        self.remove_b.setObjectName("remove_model")
        self.remove_b.setToolTip("Take the selected model off this list (the file stays on disk)")
        self.remove_b.clicked.connect(self._remove)
        row.addWidget(open_b)
        row.addWidget(folder_b)
        row.addStretch(1)
        row.addWidget(self.remove_b)
        lay.addLayout(row)
        self._entries: dict[str, LibraryEntry] = {}
        self._pins: dict[str, Pins] = {}
        self._selecting = False
        self.context_menu: QMenu | None = None

    def set_entries(
        self, entries: list[LibraryEntry], selected: Path | None, pins: dict[Path, Pins] | None = None
    ) -> None:
        """List `entries`; `pins`: what the user pinned for each model (none where absent)."""
        self._selecting = True
        try:
            self.tree.clear()
            self._entries = {str(e.path): e for e in entries}
            self._pins = {str(p): v for p, v in (pins or {}).items()}
            for e in entries:
                item = QTreeWidgetItem(self._cells(e))
                item.setData(0, Qt.ItemDataRole.UserRole, str(e.path))
                self._show_pins(item, e)
                color = BADGE_COLORS.get(e.badge)
                if color:
                    item.setForeground(1, QColor(color))
                self.tree.addTopLevelItem(item)
                if selected is not None and Path(selected) == e.path:
                    item.setSelected(True)
                    self.tree.setCurrentItem(item)
        finally:
            self._selecting = False
        self._update_remove()

    def set_pins(self, path: Path, pins: Pins) -> None:
        """The user pinned or unpinned a setting of `path`: its row's mark follows at once."""
        self._pins[str(path)] = pins
        item = self.item_for(path)
        e = self._entries.get(str(path))
        if item is not None and e is not None:
            item.setText(0, self._cells(e)[0])
            self._show_pins(item, e)

    def pinned(self, path: Path) -> list[str]:
        """The pins the row of `path` lists ("Context 1K", ...); [] when it shows no mark."""
        return pinned_labels(self._pins.get(str(path), Pins()))

    def _show_pins(self, item: QTreeWidgetItem, e: LibraryEntry) -> None:
        labels = self.pinned(e.path)
        tip = str(e.path) + (f"\n{e.error}" if e.error else "")
        if labels and e.spec is not None:
            item.setText(0, item.text(0).replace("\n", PINNED_MARK + "\n", 1))
            tip += (
                "\nPinned by you for this model (Plan panel, \u201cpinned \u00d7\u201d gives one back): "
                + ", ".join(labels)
            )
        item.setToolTip(0, tip)

    def item_for(self, path: Path) -> QTreeWidgetItem | None:
        """The row of `path` (None: not listed)."""
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is not None and Path(item.data(0, Qt.ItemDataRole.UserRole)) == path:
                return item
        return None

    @staticmethod
    def _cells(e: LibraryEntry) -> list[str]:
        """Two lines: what the model is called, then what a user picks it by."""
        name = e.path.name + (" (built-in)" if e.embedded else "")
        if e.spec is None:
            return [f"{name}\n{e.error or 'not readable'}", e.badge]
        s = e.spec
        details = " · ".join(
            [
                one_line(s.architecture),  # a file's own string: a megabyte of it froze the list for seconds
                format_bytes(s.file_bytes),
                one_line(s.file_type or "?"),
                f"{format_tokens(s.n_ctx_train)} trained" if s.n_ctx_train else "context unknown",
            ]
        )
        return [f"{name}\n{details}", e.badge]

    def entry(self, path: Path) -> LibraryEntry | None:
        return self._entries.get(str(path))

    def selected_path(self) -> Path | None:
        items = self.tree.selectedItems()
        return Path(items[0].data(0, Qt.ItemDataRole.UserRole)) if items else None

    def select(self, path: Path) -> None:
        item = self.item_for(path)
        if item is not None:
            self.tree.setCurrentItem(item)

    def _selected(self) -> None:
        self._update_remove()
        if self._selecting:
            return
        path = self.selected_path()
        if path is None:
            return
        e = self._entries.get(str(path))
        if e is not None and e.spec is None:
            self.unreadable_selected.emit(e)
        else:
            self.model_selected.emit(path)

    def _removable(self) -> Path | None:
        """The selected row's file, unless it is the built-in model (which cannot be removed)."""
        path = self.selected_path()
        e = self._entries.get(str(path)) if path else None
        return path if e is not None and not e.embedded else None

    def _update_remove(self) -> None:
        self.remove_b.setEnabled(self._removable() is not None)

    def _remove(self) -> None:
        path = self._removable()
        if path is not None:
            self.remove_requested.emit(path)

    def _context_menu(self, pos: QPoint) -> None:
        item = self.tree.itemAt(pos)
        if item is None:
            return
        self.tree.setCurrentItem(item)
        menu = QMenu(self.tree)
        menu.setObjectName("library_menu")
        remove = menu.addAction("Remove from the list")
        remove.setObjectName("library_remove")
        remove.setEnabled(self._removable() is not None)
        remove.triggered.connect(self._remove)
        menu.popup(self.tree.viewport().mapToGlobal(pos))
        self.context_menu = menu  # kept for tests, which trigger its action
