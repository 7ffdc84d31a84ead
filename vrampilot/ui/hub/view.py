"""The Hub tab: search Hugging Face, see which file fits this machine and how fast, download it.

It presents the Hub controller (hub_controller.py), which holds the state and makes every call
into vrampilot.hub, and forwards what the user does to it.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
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

from vrampilot.hub import (
    AccessDeniedError,
    Badge,
    DownloadProgress,
    DownloadResult,
    DownloadState,
    Fit,
    PendingDownload,
    RemoteModel,
    RepoFiles,
    RepoSummary,
)
from vrampilot.hub.badge import format_tps
from vrampilot.hub.search import SORT_KEYS
from vrampilot.ui.hub.controller import HubController, HubState
from vrampilot.ui.theme import OK_GREEN, OVER_BUDGET, WARN_AMBER
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
    """Paste a Hugging Face token; the controller checks it with the Hub, then keeps it in the
    keyring or the Hub's own token file (never in our settings)."""

    def __init__(self, controller: HubController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
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
        controller.token_accepted.connect(self._ok)
        controller.token_rejected.connect(self._failed)

    def check(self) -> None:
        token = self.token_edit.text().strip()
        if not token:
            self.message.setText("Paste a token first.")
            return
        self.buttons.setEnabled(False)
        self.message.setText("Checking the token with the Hub…")
        self.controller.check_token(token)

    def _ok(self, user: str, where: str) -> None:
        self.message.setText(f"Signed in as {user}; token stored in {where}.")
        self.accept()

    def _failed(self, text: str) -> None:
        self.buttons.setEnabled(True)
        self.message.setText(f"<span style='color:{OVER_BUDGET}'>{text}</span>")


class HubView(QWidget):
    """Search → results → a repository's files with fit badges → verified, resumable download."""

    status_changed = Signal(str)

    RESULT_COLUMNS = ("Repository", "Downloads", "Likes", "Updated", "Params", "Licence")
    FILE_COLUMNS = ("File", "Size", "On this machine", "Speed")

    def __init__(self, controller: HubController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = hub = controller
        self.items: dict[str, QTreeWidgetItem] = {}  # first filename -> its row in the files tree
        self._build()
        for signal, slot in (
            (hub.status, self.set_status),
            (hub.error, lambda text: self.set_status(text, error=True)),
            (hub.search_started, lambda: self._searching(True)),
            (hub.search_ended, lambda: self._searching(False)),
            (hub.results_ready, self._show_results),
            (hub.listing_started, self._listing_started),
            (hub.listing_ready, self._show_listing),
            (hub.listing_failed, lambda: self.repo_label.setText("Could not list this repository.")),
            (hub.context_changed, self._show_context),
            (hub.badge_pending, self._badge_pending),
            (hub.badge_ready, self._show_badge),
            (hub.badge_failed, self._badge_failed),
            (hub.state_changed, self._state_changed),
            (hub.download_started, self._download_started),
            (hub.download_finished, self._download_finished),
            (hub.download_failed, self._download_failed),
            (hub.download_discarded, self._download_discarded),
            (hub.pending_changed, self._show_pending),
            (hub.account_changed, self._account_changed),
        ):
            signal.connect(slot)
        hub.add_progress_listener(self._download_progress)
        self._refresh_account()
        self._show_pending(hub.pending)

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
        self.cancel_search_b.clicked.connect(self.controller.cancel_search)
        self.cancel_search_b.hide()
        self.ctx_box = QComboBox()
        self.ctx_box.setObjectName("hub_ctx")
        self.ctx_box.setToolTip("Context the badges are planned for")
        for n in sorted({*CONTEXTS, self.controller.n_ctx}):
            self.ctx_box.addItem(f"{format_tokens(n)} context", n)
        self.ctx_box.setCurrentIndex(self.ctx_box.findData(self.controller.n_ctx))
        self.ctx_box.currentIndexChanged.connect(
            lambda _i: self.controller.set_context(int(self.ctx_box.currentData()))
        )
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
        self.pause_b.clicked.connect(self.controller.pause_or_resume)
        self.cancel_b = QPushButton("Cancel")
        self.cancel_b.setObjectName("hub_cancel")
        self.cancel_b.clicked.connect(self.controller.cancel_download)
        self.progress = QProgressBar()
        self.progress.setObjectName("hub_progress")
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.progress.setFormat("")
        self.progress_label = QLabel("")
        self.progress_label.setObjectName("hub_progress_label")
        # Offered with a model of a repository that has projectors: the one that fits follows it.
        self.with_projector = QCheckBox("with its vision projector")
        self.with_projector.setObjectName("hub_with_projector")
        self.with_projector.setToolTip(
            "After the model, download this repository's vision projector (mmproj) that fits it, "
            "into the same folder, where `vrampilot plan/serve --mmproj auto` finds it."
        )
        self.with_projector.setChecked(True)
        self.with_projector.setVisible(False)
        for button in (self.download_b, self.with_projector, self.pause_b, self.cancel_b):
            dl.addWidget(button)
        dl.addWidget(self.progress, 1)
        dl.addWidget(self.progress_label, 1)
        lay.addLayout(dl)

        self.pending_label = QLabel("")
        self.pending_label.setObjectName("hub_pending")
        self.pending_label.setWordWrap(True)
        self.resume_b = QPushButton("Resume")
        self.resume_b.setObjectName("hub_resume_pending")
        self.resume_b.clicked.connect(self.controller.resume_pending)
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

    # -- search ----------------------------------------------------------------------------------

    def search(self) -> None:
        lo, hi = self.size_box.currentData()
        self.controller.search(
            self.query.text().strip(),
            sort=str(self.sort.currentData()),
            architecture=self.arch.currentData(),
            min_params=lo,
            max_params=hi,
        )

    def _searching(self, on: bool) -> None:
        self.search_b.setEnabled(not on)
        self.cancel_search_b.setVisible(on)

    def _show_results(self, results: list[RepoSummary]) -> None:
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

    # -- repository files ------------------------------------------------------------------------

    def _result_selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            item = self.table.item(rows[0].row(), 0)
            if item is not None:
                self.controller.open_repo(str(item.data(_ROLE)))

    def _listing_started(self, repo_id: str) -> None:
        self.with_projector.setVisible(False)
        self.files.clear()
        self.items.clear()
        self.repo_label.setText(f"<b>{repo_id}</b> — listing files…")

    def _show_listing(self, listing: RepoFiles) -> None:
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
        self.with_projector.setVisible(bool(listing.mmproj))
        self._update_buttons()

    def _update_repo_label(self) -> None:
        listing = self.controller.listing
        if listing is None:
            return
        n = len(listing.models)
        gated = ""
        if listing.gated:
            gated = " · gated: sign in to download" if self.controller.token() is None else " · gated"
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
        self.items[m.first.filename] = item
        return item

    # -- target, context and badges --------------------------------------------------------------

    def _show_context(self, n_ctx: int) -> None:
        idx = self.ctx_box.findData(n_ctx)
        if idx < 0:
            self.ctx_box.addItem(f"{format_tokens(n_ctx)} context", n_ctx)
            idx = self.ctx_box.count() - 1
        self.ctx_box.blockSignals(True)
        self.ctx_box.setCurrentIndex(idx)
        self.ctx_box.blockSignals(False)

    def _badge_pending(self, key: str, text: str) -> None:
        item = self.items[key]
        item.setText(2, text)
        self._set_badge_widget(item, None)

    def _show_badge(self, key: str, badge: Badge) -> None:
        item = self.items[key]
        item.setText(2, "")
        self._set_badge_widget(item, badge)
        item.setText(3, "" if badge.fit is Fit.TOO_LARGE else format_tps(badge.decode_tps))
        item.setTextAlignment(3, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        item.setToolTip(
            2,
            f"{badge.architecture}, {_count(badge.n_params)} parameters, {format_tokens(badge.n_ctx)} context, "
            f"{badge.kv_type} KV cache, {badge.n_gpu_layers}/{badge.n_layers_total} layers on the GPU.\n{badge.reason}",
        )

    def _badge_failed(self, key: str, text: str, detail: str) -> None:
        item = self.items[key]
        item.setText(2, text)
        item.setToolTip(2, detail)

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

    # -- downloads -------------------------------------------------------------------------------

    def selected_file(self) -> str | None:
        items = self.files.selectedItems()
        if not items:
            return None
        value = items[0].data(0, _ROLE)
        return str(value) if value else None

    def download_selected(self) -> None:
        filename, listing = self.selected_file(), self.controller.listing
        if filename is None or listing is None:
            return
        self.controller.start_download(
            listing.repo_id, filename, listing=listing, with_projector=self.with_projector.isChecked()
        )

    def _download_started(self, _repo_id: str, _filename: str) -> None:
        self.progress.setValue(0)
        self.progress.setFormat("%p%")
        self.progress_label.setText("starting…")
        self.pause_b.setText("Pause")

    def _download_progress(self, p: DownloadProgress) -> None:
        self.progress.setValue(int(1000 * p.fraction))
        text = p.describe()
        if p.state is DownloadState.CHECKING and p.resumed_bytes:
            text += f" (resuming: {format_bytes(p.resumed_bytes)} already here)"
        self.progress_label.setText(text)

    def _download_finished(self, result: DownloadResult) -> None:
        if result.status == "done" and result.path is not None:
            self.progress.setValue(1000)
            self.progress_label.setText(f"{format_bytes(result.total_bytes)} · sha256 verified")
        elif result.status == "paused":
            self.progress_label.setText(self.progress_label.text().split(" · ")[0] + " · paused")
        else:
            self._download_discarded()

    def _download_failed(self, exc: BaseException) -> None:
        self.progress_label.setText("stopped")
        if isinstance(exc, AccessDeniedError):
            self.account.setFocus()

    def _download_discarded(self) -> None:
        self.progress.setValue(0)
        self.progress.setFormat("")
        self.progress_label.setText("cancelled")

    def _state_changed(self, state: HubState) -> None:
        if state is HubState.PAUSING:
            self.progress_label.setText("pausing…")
        elif state is HubState.CANCELLING:
            self.progress_label.setText("cancelling…")
        self._update_buttons()

    def _show_pending(self, pending: list[PendingDownload]) -> None:
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
        self.resume_b.setEnabled(not self.controller.downloading)

    def _update_buttons(self) -> None:
        state = self.controller.state
        busy = self.controller.downloading
        self.download_b.setEnabled(not busy and self.selected_file() is not None)
        self.pause_b.setEnabled(state in (HubState.DOWNLOADING, HubState.CANCELLING, HubState.PAUSED))
        self.pause_b.setText("Resume" if state is HubState.PAUSED else "Pause")
        self.cancel_b.setEnabled(state is not HubState.IDLE)
        self.resume_b.setEnabled(not busy)

    # -- account ---------------------------------------------------------------------------------

    def _refresh_account(self) -> None:
        info = self.controller.token()
        self.account.setText("Signed in ✓" if info else "Sign in…")
        self.account.setToolTip(f"Token from {info.source}" if info else "Sign in to download gated models")

    def _account_changed(self) -> None:
        self._refresh_account()
        self._update_repo_label()

    def sign_in(self) -> SignInDialog:
        dlg = SignInDialog(self.controller, self)
        dlg.open()
        return dlg

    # -- status ----------------------------------------------------------------------------------

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.setText(f"<span style='color:{OVER_BUDGET}'>{text}</span>" if error else text)
        self.status.setToolTip(text)
        self.status_changed.emit(text)

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Pause a running download (its bytes stay for next time) and wait for it to stop."""
        self.controller.shutdown(timeout_ms)

    def closeEvent(self, event: Any) -> None:
        self.shutdown()
        super().closeEvent(event)
