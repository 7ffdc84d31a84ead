"""The Hub tab: search Hugging Face, see which file fits this machine and how fast, download it.

A thin layer over vrampilot.hub: searches, listings, remote headers and badges run as tasks
(vrampilot.ui.workers.Tasks; a newer search or listing supersedes the older one); a download runs as
a long task, on the pool for long work, so it never holds a short task's thread for minutes.
Pause and cancel are flags the download checks (DownloadControl), never a killed thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from vrampilot.gguf import GGUFError
from vrampilot.hub import (
    DEFAULT_TARGET_CTX,
    AccessDeniedError,
    Badge,
    DownloadControl,
    Downloader,
    DownloadInterruptedError,
    DownloadProgress,
    DownloadResult,
    DownloadState,
    Fit,
    HubError,
    HubUnreachableError,
    NotEnoughSpaceError,
    PendingDownload,
    RemoteModel,
    RepoFiles,
    RepoSummary,
    badge_for_spec,
    current_token,
    list_pending,
    list_repo_files,
    remote_spec,
    save_token,
    search_models,
    validate_token,
)
from vrampilot.hub.badge import format_tps
from vrampilot.hub.search import SORT_KEYS
from vrampilot.planner.target import Target, target_from_machine
from vrampilot.ui.theme import OK_GREEN, OVER_BUDGET, WARN_AMBER
from vrampilot.ui.workers import TaskHandle, Tasks
from vrampilot.units import format_bytes, format_tokens

CPU_BLUE = "#4e79a7"
FIT_COLORS = {Fit.GPU: OK_GREEN, Fit.PARTIAL: WARN_AMBER, Fit.CPU: CPU_BLUE, Fit.TOO_LARGE: OVER_BUDGET}
ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gemma2", "phi3", "mistral3", "deepseek2", "gpt-oss")
SIZES: tuple[tuple[str, int | None, int | None], ...] = (
    ("Any size", None, None),
    ("Up to 3B", None, 3_500_000_000),
    ("3B–9B", 3_000_000_000, 9_500_000_000),
    ("9B–16B", 9_000_000_000, 16_500_000_000),
    ("16B–40B", 16_000_000_000, 40_500_000_000),
    ("Over 40B", 40_000_000_000, None),
)
SORT_LABELS = {"downloads": "Most downloaded", "likes": "Most liked", "recent": "Recently updated"}
CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072)
_ROLE = Qt.ItemDataRole.UserRole


def _count(n: int | None) -> str:
    if n is None:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return str(n)


class SignInDialog(QDialog):
    """Paste a Hugging Face token; it is checked with the Hub, then kept in the keyring or the
    Hub's own token file (never in our settings)."""

    signed_in = Signal(str)  # account name

    def __init__(self, tasks: Tasks, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.setWindowTitle("Sign in to Hugging Face")
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("x") * 70)
        lay = QVBoxLayout(self)
        intro = QLabel(
            "Gated models (Llama, Gemma, …) need a Hugging Face access token with read access, and "
            "you must accept the model's conditions on its Hub page first.<br>"
            'Create a token at <a href="https://huggingface.co/settings/tokens">huggingface.co/settings/tokens</a>.'
        )
        intro.setWordWrap(True)
        intro.setOpenExternalLinks(True)
        lay.addWidget(intro)
        self.token_edit = QLineEdit()
        self.token_edit.setObjectName("hub_token")
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("hf_…")
        lay.addWidget(self.token_edit)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        lay.addWidget(self.message)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.check)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)

    def check(self) -> None:
        token = self.token_edit.text().strip()
        if not token:
            self.message.setText("Paste a token first.")
            return
        self.buttons.setEnabled(False)
        self.message.setText("Checking the token with the Hub…")

        def work(_task: TaskHandle) -> tuple[str, str]:
            user = validate_token(token)
            return user, save_token(token)

        self.tasks.submit(work, done=self._ok, failed=self._failed, owner=self)

    def _ok(self, result: tuple[str, str]) -> None:
        user, where = result
        self.message.setText(f"Signed in as {user}; token stored in {where}.")
        self.signed_in.emit(user)
        self.accept()

    def _failed(self, exc: BaseException) -> None:
        self.buttons.setEnabled(True)
        self.message.setText(f"<span style='color:{OVER_BUDGET}'>{exc}</span>")


@dataclass
class _ModelRow:
    model: RemoteModel
    item: QTreeWidgetItem
    badge: Badge | None = None
    error: str | None = None


class HubView(QWidget):
    """Search → results → a repository's files with fit badges → verified, resumable download."""

    model_downloaded = Signal(str)  # path of the downloaded model (first part of a split model)
    status_changed = Signal(str)

    RESULT_COLUMNS = ("Repository", "Downloads", "Likes", "Updated", "Params", "Licence")
    FILE_COLUMNS = ("File", "Size", "On this machine", "Speed")

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        target: Target | None = None,
        n_ctx: int = DEFAULT_TARGET_CTX,
        detect: bool = True,
        tasks: Tasks | None = None,
    ) -> None:
        super().__init__(parent)
        # The window passes the app's Tasks; a view on its own (tests, a dialog) makes its own.
        self.tasks = tasks or Tasks(self)
        self.target = target
        self.n_ctx = n_ctx
        self.results: list[RepoSummary] = []
        self.listing: RepoFiles | None = None
        self.rows: dict[str, _ModelRow] = {}  # first filename -> row
        self._download: TaskHandle | None = None
        self._control: DownloadControl | None = None
        self._download_key: tuple[str, str] | None = None
        self._build()
        self._refresh_account()
        self._refresh_pending()
        # The main window passes detect=False and sets the target it already detected.
        if self.target is None and detect:
            self.tasks.submit(lambda _t: self._detect_target(), done=self._target_ready, failed=self._show_error,
                              owner=self)  # fmt: skip

    # -- layout ----------------------------------------------------------------------------------

    def _build(self) -> None:
        lay = QVBoxLayout(self)
        bar = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setObjectName("hub_query")
        self.query.setPlaceholderText("Search GGUF models on Hugging Face, e.g. qwen2.5 7b instruct")
        self.query.returnPressed.connect(self.search)
        self.sort = QComboBox()
        self.sort.setObjectName("hub_sort")
        for key in SORT_KEYS:
            self.sort.addItem(SORT_LABELS[key], key)
        self.arch = QComboBox()
        self.arch.setObjectName("hub_arch")
        self.arch.addItem("Any architecture", None)
        for a in ARCHITECTURES:
            self.arch.addItem(a, a)
        self.size_box = QComboBox()
        self.size_box.setObjectName("hub_size")
        for label, lo, hi in SIZES:
            self.size_box.addItem(label, (lo, hi))
        self.search_b = QPushButton("Search")
        self.search_b.setObjectName("hub_search")
        self.search_b.clicked.connect(self.search)
        self.cancel_search_b = QPushButton("Cancel")
        self.cancel_search_b.setObjectName("hub_cancel_search")
        self.cancel_search_b.clicked.connect(self.cancel_search)
        self.cancel_search_b.hide()
        self.ctx_box = QComboBox()
        self.ctx_box.setObjectName("hub_ctx")
        self.ctx_box.setToolTip("Context the badges are planned for")
        for n in sorted({*CONTEXTS, self.n_ctx}):
            self.ctx_box.addItem(f"{format_tokens(n)} context", n)
        self.ctx_box.setCurrentIndex(self.ctx_box.findData(self.n_ctx))
        self.ctx_box.currentIndexChanged.connect(lambda _i: self.set_context(int(self.ctx_box.currentData())))
        self.account = QPushButton("Sign in…")
        self.account.setObjectName("hub_sign_in")
        self.account.clicked.connect(self.sign_in)
        # Two rows, so that the Hub tab fits a narrow window: what to find, then how to filter it.
        bar.addWidget(self.query, 1)
        for w in (self.search_b, self.cancel_search_b, self.account):
            bar.addWidget(w)
        lay.addLayout(bar)
        filters = QHBoxLayout()
        for box in (self.sort, self.arch, self.size_box, self.ctx_box):
            box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            box.setMinimumContentsLength(5)
            filters.addWidget(box, 1)
        lay.addLayout(filters)

        split = QSplitter(Qt.Orientation.Vertical)
        self.table = QTableWidget(0, len(self.RESULT_COLUMNS))
        self.table.setObjectName("hub_results")
        self.table.setHorizontalHeaderLabels(list(self.RESULT_COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        hdr = self.table.horizontalHeader()
        hdr.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i in range(1, len(self.RESULT_COLUMNS)):
            hdr.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._result_selected)
        split.addWidget(self.table)

        files_box = QWidget()
        fl = QVBoxLayout(files_box)
        fl.setContentsMargins(0, 0, 0, 0)
        self.repo_label = QLabel("Pick a repository to see its files.")
        self.repo_label.setObjectName("hub_repo_label")
        self.repo_label.setWordWrap(True)
        fl.addWidget(self.repo_label)
        self.files = QTreeWidget()
        self.files.setObjectName("hub_files")
        self.files.setColumnCount(len(self.FILE_COLUMNS))
        self.files.setHeaderLabels(list(self.FILE_COLUMNS))
        self.files.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        fh = self.files.header()
        fh.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i in range(1, len(self.FILE_COLUMNS)):
            fh.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        fh.setStretchLastSection(False)
        self.files.itemSelectionChanged.connect(self._update_buttons)
        self.files.itemDoubleClicked.connect(lambda *_: self.download_selected())
        fl.addWidget(self.files)
        split.addWidget(files_box)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        lay.addWidget(split, 1)

        dl = QHBoxLayout()
        self.download_b = QPushButton("Download")
        self.download_b.setObjectName("hub_download")
        self.download_b.clicked.connect(self.download_selected)
        self.pause_b = QPushButton("Pause")
        self.pause_b.setObjectName("hub_pause")
        self.pause_b.clicked.connect(self.pause_or_resume)
        self.cancel_b = QPushButton("Cancel")
        self.cancel_b.setObjectName("hub_cancel")
        self.cancel_b.clicked.connect(self.cancel_download)
        self.progress = QProgressBar()
        self.progress.setObjectName("hub_progress")
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.progress.setFormat("")
        self.progress_label = QLabel("")
        self.progress_label.setObjectName("hub_progress_label")
        for w in (self.download_b, self.pause_b, self.cancel_b):
            dl.addWidget(w)
        dl.addWidget(self.progress, 1)
        dl.addWidget(self.progress_label, 1)
        lay.addLayout(dl)

        self.pending_label = QLabel("")
        self.pending_label.setObjectName("hub_pending")
        self.pending_label.setWordWrap(True)
        self.resume_b = QPushButton("Resume")
        self.resume_b.setObjectName("hub_resume_pending")
        self.resume_b.clicked.connect(self.resume_pending)
        pend = QHBoxLayout()
        pend.addWidget(self.pending_label, 1)
        pend.addWidget(self.resume_b)
        lay.addLayout(pend)

        self.status = QLabel("")
        self.status.setObjectName("hub_status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.status)
        self._update_buttons()

    # -- target and context ----------------------------------------------------------------------

    @staticmethod
    def _detect_target() -> Target:
        from vrampilot.hardware import detect_machine

        return target_from_machine(detect_machine())

    def _target_ready(self, target: Target) -> None:
        self.set_target(target)

    def set_target(self, target: Target) -> None:
        """Plan badges for `target` (the main window passes the GPU or profile the user picked)."""
        self.target = target
        self._compute_badges()

    def set_context(self, n_ctx: int) -> None:
        if n_ctx == self.n_ctx:
            return
        self.n_ctx = n_ctx
        idx = self.ctx_box.findData(n_ctx)
        if idx < 0:
            self.ctx_box.addItem(f"{format_tokens(n_ctx)} context", n_ctx)
            idx = self.ctx_box.count() - 1
        self.ctx_box.blockSignals(True)
        self.ctx_box.setCurrentIndex(idx)
        self.ctx_box.blockSignals(False)
        self._compute_badges()

    # -- search ----------------------------------------------------------------------------------

    def search(self) -> None:
        text = self.query.text().strip()
        sort = str(self.sort.currentData())
        arch = self.arch.currentData()
        lo, hi = self.size_box.currentData()
        self.set_status(f"Searching the Hub for {text or 'GGUF models'}…")
        self.search_b.setEnabled(False)
        self.cancel_search_b.show()

        def work(_task: TaskHandle) -> list[RepoSummary]:
            return search_models(text, sort=sort, architecture=arch, min_params=lo, max_params=hi)  # type: ignore[arg-type]  # sort: one of SORT_KEYS, from the combo box

        # A newer search supersedes this one: its results are dropped.
        self.tasks.submit(work, done=self._search_done, failed=self._search_failed, key="hub-search", owner=self)

    def cancel_search(self) -> None:
        """Stop waiting for the Hub (the request itself ends on its own timeout, unseen)."""
        self.tasks.cancel("hub-search")
        self.search_b.setEnabled(True)
        self.cancel_search_b.hide()
        self.set_status("Search cancelled.")

    def _search_done(self, results: list[RepoSummary]) -> None:
        self.search_b.setEnabled(True)
        self.cancel_search_b.hide()
        self.results = results
        self.table.setRowCount(0)
        for r in results:
            row = self.table.rowCount()
            self.table.insertRow(row)
            cells = [
                r.repo_id + ("  (gated)" if r.gated else ""),
                _count(r.downloads),
                str(r.likes),
                r.last_modified.date().isoformat() if r.last_modified else "",
                _count(r.n_params),
                r.license or "",
            ]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(_ROLE, r.repo_id)
                if col in (1, 2, 4):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)
        self.set_status(f"{len(results)} repositories" if results else "No GGUF repositories match.")

    def _search_failed(self, exc: BaseException) -> None:
        self.search_b.setEnabled(True)
        self.cancel_search_b.hide()
        self._show_error(exc)

    # -- repository files ------------------------------------------------------------------------

    def _result_selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            item = self.table.item(rows[0].row(), 0)
            if item is not None:
                self.open_repo(str(item.data(_ROLE)))

    def open_repo(self, repo_id: str) -> None:
        self.files.clear()
        self.rows.clear()
        self.listing = None
        self.repo_label.setText(f"<b>{repo_id}</b> — listing files…")
        self.tasks.submit(lambda _t: list_repo_files(repo_id), done=self._files_done, failed=self._files_failed,
                          key="hub-files", owner=self)  # fmt: skip

    def _files_failed(self, exc: BaseException) -> None:
        self.repo_label.setText("Could not list this repository.")
        self._show_error(exc)

    def _files_done(self, listing: RepoFiles) -> None:
        self.listing = listing
        self._update_repo_label()
        for quant, models in listing.by_quant():
            group = QTreeWidgetItem([quant, "", "", ""])
            group.setFlags(group.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            self.files.addTopLevelItem(group)
            for m in models:
                self._add_model_item(group, m)
            group.setExpanded(True)
        if listing.mmproj:
            group = QTreeWidgetItem(["Vision projectors (mmproj)", "", "", ""])
            group.setFlags(group.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            self.files.addTopLevelItem(group)
            for m in listing.mmproj:
                item = self._add_model_item(group, m)
                item.setText(2, "for image input")
            group.setExpanded(True)
        self._compute_badges()
        self._update_buttons()

    def _update_repo_label(self) -> None:
        listing = self.listing
        if listing is None:
            return
        n = len(listing.models)
        gated = ""
        if listing.gated:
            gated = " · gated: sign in to download" if current_token() is None else " · gated"
        self.repo_label.setText(
            f"<b>{listing.repo_id}</b> — {n} model file{'s' if n != 1 else ''}{gated}"
            if n or listing.mmproj
            else f"<b>{listing.repo_id}</b> has no GGUF files."
        )

    def _add_model_item(self, group: QTreeWidgetItem, m: RemoteModel) -> QTreeWidgetItem:
        name = m.first.filename.rpartition("/")[2]
        if m.is_split:
            name = f"{m.name}  ({len(m.files)} parts)" + ("" if m.complete else f" — {m.split_count} expected")
        item = QTreeWidgetItem([name, format_bytes(m.total_bytes), "", ""])
        item.setData(0, _ROLE, m.first.filename)
        item.setToolTip(0, "\n".join(f.filename for f in m.files))
        item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        group.addChild(item)
        self.rows[m.first.filename] = _ModelRow(m, item)
        return item

    # -- badges ----------------------------------------------------------------------------------

    def _compute_badges(self) -> None:
        listing, target, n_ctx = self.listing, self.target, self.n_ctx
        if listing is None:
            return
        for key, row in self.rows.items():
            if row.model.is_mmproj:
                continue
            if target is None:
                row.item.setText(2, "checking this machine…")
                continue
            row.item.setText(2, "reading header…")
            self._set_badge_widget(row.item, None)

            def work(_task: TaskHandle, m: RemoteModel = row.model) -> Badge:
                spec = remote_spec(listing.repo_id, m, revision=listing.commit)
                return badge_for_spec(spec, target, n_ctx)

            # One key per file: a newer listing, target or context supersedes each badge.
            self.tasks.submit(work, done=partial(self._badge_done, listing, n_ctx, key),
                              failed=partial(self._badge_failed, listing, key), key=f"hub-badge:{key}",
                              owner=self)  # fmt: skip

    def _badge_done(self, listing: RepoFiles, n_ctx: int, key: str, badge: Badge) -> None:
        row = self.rows.get(key)
        if listing is not self.listing or n_ctx != self.n_ctx or row is None:
            return
        row.badge = badge
        row.item.setText(2, "")
        self._set_badge_widget(row.item, badge)
        row.item.setText(3, "" if badge.fit is Fit.TOO_LARGE else format_tps(badge.decode_tps))
        row.item.setTextAlignment(3, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        row.item.setToolTip(
            2,
            f"{badge.architecture}, {_count(badge.n_params)} parameters, {format_tokens(badge.n_ctx)} context, "
            f"{badge.kv_type} KV cache, {badge.n_gpu_layers}/{badge.n_layers_total} layers on the GPU.\n{badge.reason}",
        )

    def _badge_failed(self, listing: RepoFiles, key: str, exc: BaseException) -> None:
        row = self.rows.get(key)
        if listing is not self.listing or row is None:
            return
        row.error = str(exc)
        if isinstance(exc, AccessDeniedError):
            text = "sign in to check"
        elif isinstance(exc, GGUFError):
            text = "unreadable header"
        else:
            text = "could not check"
        row.item.setText(2, text)
        row.item.setToolTip(2, str(exc))

    def _set_badge_widget(self, item: QTreeWidgetItem, badge: Badge | None) -> None:
        if badge is None:
            self.files.removeItemWidget(item, 2)
            return
        label = QLabel(badge.label)
        label.setObjectName("hub_badge")
        label.setProperty("fit", badge.fit.value)
        label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        label.setStyleSheet(
            f"QLabel {{ background: {FIT_COLORS[badge.fit]}; color: white; border-radius: 8px; "
            "padding: 1px 10px; font-weight: 600; }"
        )
        holder = QWidget()
        hl = QHBoxLayout(holder)
        hl.setContentsMargins(2, 1, 2, 1)
        hl.addWidget(label)
        hl.addStretch(1)
        self.files.setItemWidget(item, 2, holder)

    def badge_for(self, filename: str) -> Badge | None:
        row = self.rows.get(filename)
        return row.badge if row else None

    # -- downloads -------------------------------------------------------------------------------

    def selected_file(self) -> str | None:
        items = self.files.selectedItems()
        if not items:
            return None
        value = items[0].data(0, _ROLE)
        return str(value) if value else None

    def download_selected(self) -> None:
        filename = self.selected_file()
        if filename is None or self.listing is None:
            return
        self.start_download(self.listing.repo_id, filename, listing=self.listing)

    def start_download(
        self, repo_id: str, filename: str, *, revision: str | None = None, listing: RepoFiles | None = None
    ) -> None:
        if self._download is not None:
            self.set_status("One download at a time: pause or cancel the current one first.")
            return
        self._control = DownloadControl()
        self._download_key = (repo_id, filename)
        downloader = Downloader(repo_id, filename, revision=revision, control=self._control, listing=listing)

        def work(task: TaskHandle) -> DownloadResult:
            downloader.on_progress = task.progress
            return downloader.run()

        def done(result: DownloadResult) -> None:
            self._download_done(result)
            self._download_finished()

        def failed(exc: BaseException) -> None:
            self._download_failed(exc)
            self._download_finished()

        self.progress.setValue(0)
        self.progress.setFormat("%p%")
        self.progress_label.setText("starting…")
        self.pause_b.setText("Pause")
        self.set_status(f"Downloading {filename} from {repo_id}…")
        self._download = self.tasks.submit(work, done=done, failed=failed, progress=self._download_progress,  # type: ignore[arg-type]  # submit types progress as taking object; the work reports DownloadProgress
                                           owner=self, long=True)  # fmt: skip
        self._update_buttons()

    def _download_progress(self, p: DownloadProgress) -> None:
        self.progress.setValue(int(1000 * p.fraction))
        text = p.describe()
        if p.state is DownloadState.CHECKING and p.resumed_bytes:
            text += f" (resuming: {format_bytes(p.resumed_bytes)} already here)"
        self.progress_label.setText(text)

    def _download_done(self, result: DownloadResult) -> None:
        if result.status != "paused":
            self._download_key = None
        if result.status == "done" and result.path is not None:
            self.progress.setValue(1000)
            self.progress_label.setText(f"{format_bytes(result.total_bytes)} · sha256 verified")
            self.set_status(f"Saved {result.model.name} to {result.path}")
            self.model_downloaded.emit(str(result.path))
        elif result.status == "paused":
            self.progress_label.setText(self.progress_label.text().split(" · ")[0] + " · paused")
            self.set_status("Paused: the bytes received are kept. Resume now or after a restart.")
        else:
            self.progress.setValue(0)
            self.progress.setFormat("")
            self.progress_label.setText("cancelled")
            self.set_status("Download cancelled; the partial file was removed.")

    def _download_failed(self, exc: BaseException) -> None:
        if not isinstance(exc, (DownloadInterruptedError, NotEnoughSpaceError, HubUnreachableError)):
            self._download_key = None  # nothing to resume: a checksum failure, no access, ...
        self.progress_label.setText("stopped")
        self._show_error(exc)
        if isinstance(exc, AccessDeniedError):
            self.account.setFocus()

    def _download_finished(self) -> None:
        self._download = None
        self._refresh_pending()
        self._update_buttons()

    @property
    def downloading(self) -> bool:
        return self._download is not None

    def pause_or_resume(self) -> None:
        if self._download is not None and self._control is not None:
            self._control.pause()
            self.pause_b.setEnabled(False)
            self.progress_label.setText("pausing…")
        elif self._download_key is not None:
            repo_id, filename = self._download_key
            listing = self.listing if self.listing and self.listing.repo_id == repo_id else None
            self.start_download(repo_id, filename, listing=listing)

    def cancel_download(self) -> None:
        if self._download is not None and self._control is not None:
            self._control.cancel()
            self.progress_label.setText("cancelling…")
        elif self._download_key is not None:
            # Cancelling a paused download: discard what it kept.
            repo_id, filename = self._download_key
            for p in list_pending():
                if p.repo_id == repo_id and p.filename == filename:
                    self._discard_pending(p)
            self._download_key = None
            self.progress.setValue(0)
            self.progress.setFormat("")
            self.progress_label.setText("cancelled")
            self._refresh_pending()
            self._update_buttons()

    @staticmethod
    def _discard_pending(p: PendingDownload) -> None:
        from vrampilot.hub.records import drop_pending

        for part in p.part_paths:
            part.unlink(missing_ok=True)
        drop_pending(p.repo_id, p.filename, p.revision)

    def _refresh_pending(self) -> None:
        pending = [p for p in list_pending() if (p.repo_id, p.filename) != self._download_key or not self.downloading]
        self._pending = pending
        if not pending:
            self.pending_label.setText("")
            self.pending_label.hide()
            self.resume_b.hide()
            return
        p = pending[0]
        more = f" (and {len(pending) - 1} more)" if len(pending) > 1 else ""
        self.pending_label.setText(
            f"Unfinished download: {p.repo_id} / {p.filename} — {format_bytes(p.have_bytes)} of "
            f"{format_bytes(p.total_bytes)}{more}"
        )
        self.pending_label.show()
        self.resume_b.show()
        self.resume_b.setEnabled(not self.downloading)

    def resume_pending(self) -> None:
        if self._pending and not self.downloading:
            p = self._pending[0]
            self.start_download(p.repo_id, p.filename, revision=p.revision)

    def _update_buttons(self) -> None:
        busy = self._download is not None
        self.download_b.setEnabled(not busy and self.selected_file() is not None)
        self.pause_b.setEnabled(busy or self._download_key is not None)
        self.pause_b.setText("Pause" if busy or self._download_key is None else "Resume")
        self.cancel_b.setEnabled(busy or self._download_key is not None)
        if hasattr(self, "_pending"):
            self.resume_b.setEnabled(not busy)

    # -- account ---------------------------------------------------------------------------------

    def _refresh_account(self) -> None:
        info = current_token()
        self.account.setText("Signed in ✓" if info else "Sign in…")
        self.account.setToolTip(f"Token from {info.source}" if info else "Sign in to download gated models")

    def sign_in(self) -> SignInDialog:
        dlg = SignInDialog(self.tasks, self)
        dlg.signed_in.connect(self._signed_in)
        dlg.open()
        return dlg

    def _signed_in(self, user: str) -> None:
        self._refresh_account()
        self.set_status(f"Signed in as {user}.")
        self._update_repo_label()
        self._compute_badges()

    # -- status ----------------------------------------------------------------------------------

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.setText(f"<span style='color:{OVER_BUDGET}'>{text}</span>" if error else text)
        self.status.setToolTip(text)
        self.status_changed.emit(text)

    def _show_error(self, exc: BaseException) -> None:
        message = str(exc) if isinstance(exc, (HubError, GGUFError)) else f"{type(exc).__name__}: {exc}"
        self.set_status(message, error=True)

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Pause a running download (its bytes stay for next time) and wait for it to stop."""
        task = self._download
        if task is not None and self._control is not None:
            self._control.pause()
            task.finished.wait(timeout_ms / 1000)

    def closeEvent(self, event: Any) -> None:
        self.shutdown()
        super().closeEvent(event)
