"""The model library behind the Models list: the files and folders the user added and the built-in
model, listed and rated off the GUI thread, and which of them the Plan panel plans.

It owns the list and the choice of model (`current`); it says "plan this one" with `chosen`, and the
plan controller answers with `select(path)` once the file has been read. It never plans: the fit
badges are rated against the target the plan controller last set (`target`).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from vrampilot.gguf import GGUFError, load_model_spec
from vrampilot.log import describe_error
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.planner.target import Target
from vrampilot.storage import scan_folder
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.library.view import LibraryEntry, LibraryView, describe_entry


def unreadable(exc: BaseException) -> str:
    """Why a model file cannot be read, after its name: a GGUF problem without the path again (the
    path before it pushed the reason past the status bar's end)."""
    return exc.problem if isinstance(exc, GGUFError) else describe_error(exc)


class LibraryController(QObject):
    chosen = Signal(object)  # Path: the user chose this model (a row, a file added, a row that now reads)
    status = Signal(str)

    def __init__(self, ctx: AppContext, view: LibraryView, *, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.view = view
        # The model the Plan panel plans (set as soon as it is asked for, before its file is read):
        # selected in the list whenever the list is made again.
        self.current: Path | None = None
        self.target: Target | None = None  # what the rows' fit badges are rated against
        view.model_selected.connect(self.chosen)
        view.unreadable_selected.connect(self._unreadable_selected)
        view.remove_requested.connect(self.remove_model)

    def refresh(self) -> None:
        """List the library again (off the GUI thread: each file's header is read)."""
        target = self.target
        if target is None:
            return
        embedded = embedded_model_path()
        paths, folders = self.ctx.library.files(), self.ctx.library.folders()

        def work(_task: object) -> list[LibraryEntry]:
            seen: set[Path] = set()
            candidates: list[tuple[Path, bool]] = []
            if embedded is not None and embedded.is_file():
                candidates.append((embedded, True))
            candidates += [(p, False) for p in paths if p.is_file()]
            for folder in folders:
                candidates += [(p, False) for p in scan_folder(folder)]
            entries = []
            for p, is_embedded in candidates:
                if p not in seen:
                    seen.add(p)
                    entries.append(describe_entry(p, target, embedded=is_embedded))
            return entries

        def failed(exc: BaseException) -> None:
            self.status.emit(f"Error listing the models: {describe_error(exc, context='listing the models')}")

        self.ctx.tasks.submit(
            work,
            # The pins and the current model are read here, on the GUI thread that writes them.
            done=lambda entries: self.view.set_entries(
                entries, self.current, {e.path: self.ctx.prefs.pins_for(e.path) for e in entries}
            ),
            failed=failed,
            key="library",
            owner=self,
        )

    def add_models(self, paths: list[Path]) -> None:
        """GGUF files join the library; the first is planned (anything else is left out)."""
        paths = [p for p in paths if p.suffix.lower() == ".gguf"]
        if not paths:
            return
        for p in paths:
            self.ctx.library.add_file(p)
        self.chosen.emit(paths[0])
        self.refresh()

    def add_folder(self, folder: Path) -> int:
        """Adds the folder; returns how many GGUF models it holds (the user hears at once)."""
        self.ctx.library.add_folder(folder)
        found = len(scan_folder(folder))
        self.status.emit(f"Added {folder}: {found} GGUF model{'s' if found != 1 else ''} found")
        self.refresh()
        return found

    def remove_model(self, path: Path) -> None:
        self.ctx.library.remove_file(path)
        self.refresh()

    def select(self, path: Path) -> None:
        """`path` was read and is planned: its row is selected; a row listed while the file was
        unreadable is listed again (it was fixed or replaced since)."""
        self.view.select(path)
        listed = self.view.entry(path)
        if listed is not None and listed.spec is None:
            self.refresh()

    def show_pins(self, path: Path, pins: Pins) -> None:
        """The pins kept for `path` changed: its row's mark follows."""
        self.view.set_pins(path, pins)

    def _unreadable_selected(self, entry: LibraryEntry) -> None:
        """A row listed as unreadable was selected: the selection stays there (Remove, Delete and the
        context menu act on it) and the shown plan stays; the file is read again in case it was
        fixed or replaced since it was listed, and planned only if it now reads."""
        path = entry.path

        def failed(exc: BaseException) -> None:
            self.status.emit(f"Could not read {path.name}: {unreadable(exc)} (Remove takes it off the list)")

        self.ctx.tasks.submit(
            lambda _t: load_model_spec(path),
            done=lambda _spec: self.chosen.emit(path),
            failed=failed,
            key="spec-check",
            owner=self,
        )
