"""The Hub tab's state and its calls into vrampilot.hub; the view (hub_view.py) presents it.

Searches, listings, remote headers, badges and the token check run as tasks
(vrampilot.ui.workers.Tasks; a newer search, listing or badge supersedes the older one); a download
runs as a long task, on the pool for long work, so it never holds a short task's thread for
minutes. Pause and cancel are flags the download checks (DownloadControl), never a killed thread.
Errors come out as text for the user (`error`), so the view never sees an exception it must word.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from vrampilot.gguf import GGUFError, load_model_spec
from vrampilot.hub import (
    DEFAULT_TARGET_CTX,
    AccessDeniedError,
    Badge,
    DownloadControl,
    Downloader,
    DownloadInterruptedError,
    DownloadProgress,
    DownloadResult,
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
from vrampilot.hub.auth import TokenInfo
from vrampilot.hub.remote import matching_remote_projector
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.ui.workers import TaskHandle, Tasks


class HubState(enum.Enum):
    """Where the one download stands (a search runs beside any of these)."""

    IDLE = "idle"  # no download, nothing to resume
    DOWNLOADING = "downloading"
    PAUSING = "pausing"  # asked to pause; the download stops at its next check and keeps its bytes
    CANCELLING = "cancelling"  # asked to cancel; the download stops at its next check and removes them
    PAUSED = "paused"  # stopped with its bytes kept (paused, or interrupted): Resume finishes it


RUNNING = (HubState.DOWNLOADING, HubState.PAUSING, HubState.CANCELLING)


@dataclass
class HubRow:
    """One model file of the open repository and what its badge check found."""

    model: RemoteModel
    badge: Badge | None = None
    error: str | None = None


def describe(exc: BaseException) -> str:
    """The Hub's own errors are written for the user; anything else says what it was."""
    return str(exc) if isinstance(exc, (HubError, GGUFError)) else f"{type(exc).__name__}: {exc}"


def _discard_pending(p: PendingDownload) -> None:
    from vrampilot.hub.records import drop_pending

    for part in p.part_paths:
        part.unlink(missing_ok=True)
    drop_pending(p.repo_id, p.filename, p.revision)


class HubController(QObject):
    """Search → results → a repository's files with fit badges → verified, resumable download."""

    status = Signal(str)
    error = Signal(str)  # a failure, in words for the user
    search_started = Signal()
    search_ended = Signal()  # results came, the search failed, or it was cancelled
    results_ready = Signal(object)  # list[RepoSummary]
    listing_started = Signal(str)  # repo id
    listing_ready = Signal(object)  # RepoFiles
    listing_failed = Signal()
    context_changed = Signal(int)
    badge_pending = Signal(str, str)  # filename, what is being done
    badge_ready = Signal(str, object)  # filename, Badge
    badge_failed = Signal(str, str, str)  # filename, short text, the error in full
    state_changed = Signal(object)  # HubState
    download_started = Signal(str, str)  # repo id, filename
    download_finished = Signal(object)  # DownloadResult: done, paused or cancelled
    download_failed = Signal(object)  # the exception (its text went to `error`)
    download_discarded = Signal()  # a paused download was cancelled: its bytes are gone
    pending_changed = Signal(object)  # list[PendingDownload] not being downloaded now
    account_changed = Signal()
    token_accepted = Signal(str, str)  # account name, where the token was stored
    token_rejected = Signal(str)
    model_downloaded = Signal(str)  # path of the downloaded model (first part of a split model)
    projector_downloaded = Signal(str)  # path of a downloaded vision projector (not a model to plan)

    def __init__(
        self,
        tasks: Tasks,
        *,
        target: Target | None = None,
        n_ctx: int = DEFAULT_TARGET_CTX,
        detect: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.target = target
        self.n_ctx = n_ctx
        self.state = HubState.IDLE
        self.results: list[RepoSummary] = []
        self.listing: RepoFiles | None = None
        self.rows: dict[str, HubRow] = {}  # first filename -> row
        self.pending: list[PendingDownload] = []
        self._download: TaskHandle | None = None
        self._control: DownloadControl | None = None
        self._download_key: tuple[str, str] | None = None  # what a Resume or Cancel applies to
        # The listing whose vision projector follows the model being downloaded (None: no projector).
        self._projector_from: RepoFiles | None = None
        self.progress: DownloadProgress | None = None  # the running download's latest report
        self._progress_listeners: list[Callable[[DownloadProgress], None]] = []
        self.refresh_pending()
        # The app passes detect=False and sets the target the plan controller already detected.
        if self.target is None and detect:
            self.tasks.submit(
                lambda _t: self._detect_target(),
                done=self.set_target,
                failed=lambda exc: self.error.emit(describe(exc)),
                owner=self,
            )

    # -- target and context ----------------------------------------------------------------------
    @staticmethod
    def _detect_target() -> Target:
        from vrampilot.speed import detect_measured_machine

        found = detect_measured_machine()
        return resolve_target(TargetRequest(), found.machine, found.speed)

    def set_target(self, target: Target) -> None:
        """Plan badges for `target` (the main window passes the GPU or profile the user picked)."""
        self.target = target
        self._compute_badges()

    def set_context(self, n_ctx: int) -> None:
        if n_ctx == self.n_ctx:
            return
        self.n_ctx = n_ctx
        self.context_changed.emit(n_ctx)
        self._compute_badges()

    # -- search ----------------------------------------------------------------------------------
    @property
    def searching(self) -> bool:
        return self.tasks.is_running("hub-search")

    def search(
        self, text: str, *, sort: str, architecture: str | None, min_params: int | None, max_params: int | None
    ) -> None:
        self.status.emit(f"Searching the Hub for {text or 'GGUF models'}…")
        self.search_started.emit()

        def work(_task: TaskHandle) -> list[RepoSummary]:
            return search_models(
                text,
                sort=sort,  # type: ignore[arg-type]  # one of SORT_KEYS, from the view's combo box
                architecture=architecture,
                min_params=min_params,
                max_params=max_params,
            )

        # A newer search supersedes this one: its results are dropped.
        self.tasks.submit(work, done=self._search_done, failed=self._search_failed, key="hub-search", owner=self)

    def cancel_search(self) -> None:
        """Stop waiting for the Hub (the request itself ends on its own timeout, unseen)."""
        self.tasks.cancel("hub-search")
        self.search_ended.emit()
        self.status.emit("Search cancelled.")

    def _search_done(self, results: list[RepoSummary]) -> None:
        self.search_ended.emit()
        self.results = results
        self.results_ready.emit(results)
        self.status.emit(f"{len(results)} repositories" if results else "No GGUF repositories match.")

    def _search_failed(self, exc: BaseException) -> None:
        self.search_ended.emit()
        self.error.emit(describe(exc))

    # -- repository files ------------------------------------------------------------------------
    def open_repo(self, repo_id: str) -> None:
        self.rows.clear()
        self.listing = None
        self.listing_started.emit(repo_id)
        self.tasks.submit(
            lambda _t: list_repo_files(repo_id),
            done=self._files_done,
            failed=self._files_failed,
            key="hub-files",
            owner=self,
        )

    def _files_failed(self, exc: BaseException) -> None:
        self.listing_failed.emit()
        self.error.emit(describe(exc))

    def _files_done(self, listing: RepoFiles) -> None:
        self.listing = listing
        for m in [m for _quant, models in listing.by_quant() for m in models] + list(listing.mmproj):
            self.rows[m.first.filename] = HubRow(m)
        self.listing_ready.emit(listing)
        self._compute_badges()

    def token(self) -> TokenInfo | None:
        """The Hugging Face token in use and where it came from, or None when signed out."""
        return current_token()

    # -- badges ----------------------------------------------------------------------------------
    def _compute_badges(self) -> None:
        listing, target, n_ctx = self.listing, self.target, self.n_ctx
        if listing is None:
            return
        for key, row in self.rows.items():
            if row.model.is_mmproj:
                continue
            if target is None:
                self.badge_pending.emit(key, "checking this machine…")
                continue
            self.badge_pending.emit(key, "reading header…")

            def work(_task: TaskHandle, m: RemoteModel = row.model) -> Badge:
                spec = remote_spec(listing.repo_id, m, revision=listing.commit)
                return badge_for_spec(spec, target, n_ctx)

            # One key per file: a newer listing, target or context supersedes each badge.
            self.tasks.submit(
                work,
                done=partial(self._badge_done, listing, n_ctx, key),
                failed=partial(self._badge_failed, listing, key),
                key=f"hub-badge:{key}",
                owner=self,
            )

    def _badge_done(self, listing: RepoFiles, n_ctx: int, key: str, badge: Badge) -> None:
        row = self.rows.get(key)
        if listing is not self.listing or n_ctx != self.n_ctx or row is None:
            return
        row.badge = badge
        self.badge_ready.emit(key, badge)

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
        self.badge_failed.emit(key, text, str(exc))

    def badge_for(self, filename: str) -> Badge | None:
        row = self.rows.get(filename)
        return row.badge if row else None

    # -- downloads -------------------------------------------------------------------------------
    @property
    def downloading(self) -> bool:
        return self.state in RUNNING

    def add_progress_listener(self, listener: Callable[[DownloadProgress], None]) -> None:
        """`listener(progress)` on the GUI thread, five times a second while a download runs. A
        plain callback, not a signal: PySide6 6.12.0 drops a reference to `True` on every emit made
        from Python (meters_feed.py), and a long download reports thousands of times."""
        self._progress_listeners.append(listener)

    def _progress(self, p: DownloadProgress) -> None:
        self.progress = p
        for listener in self._progress_listeners:
            listener(p)

    def _set_state(self, state: HubState) -> None:
        self.state = state
        self.state_changed.emit(state)

    def start_download(
        self,
        repo_id: str,
        filename: str,
        *,
        revision: str | None = None,
        listing: RepoFiles | None = None,
        with_projector: bool = False,
    ) -> None:
        """Download a model; with_projector: then the listing's vision projector that fits it (its
        header read by range request), into the same snapshot folder, where the plan finds it."""
        if self.downloading:
            self.status.emit("One download at a time: pause or cancel the current one first.")
            return
        self._projector_from = listing if with_projector and listing is not None and listing.mmproj else None
        self._control = DownloadControl()
        self._download_key = (repo_id, filename)
        self.progress = None
        downloader = Downloader(repo_id, filename, revision=revision, control=self._control, listing=listing)

        def work(task: TaskHandle) -> DownloadResult:
            downloader.on_progress = task.progress
            return downloader.run()

        self.download_started.emit(repo_id, filename)
        self.status.emit(f"Downloading {filename} from {repo_id}…")
        self._download = self.tasks.submit(
            work,
            done=self._download_done,
            failed=self._download_failed,
            progress=self._progress,  # type: ignore[arg-type]  # submit types progress as taking object; the work reports DownloadProgress
            owner=self,
            long=True,
        )
        self._set_state(HubState.DOWNLOADING)

    def _download_done(self, result: DownloadResult) -> None:
        if result.status != "paused":
            self._download_key = None
        self.download_finished.emit(result)
        if result.status == "done" and result.path is not None:
            self.status.emit(f"Saved {result.model.name} to {result.path}")
            if result.model.is_mmproj:
                self.projector_downloaded.emit(str(result.path))
            else:
                self.model_downloaded.emit(str(result.path))
            follow, self._projector_from = self._projector_from, None
            if follow is not None and not result.model.is_mmproj:
                self._download_ended()
                self._find_projector(follow, result.path)
                return
        elif result.status == "paused":
            self.status.emit("Paused: the bytes received are kept. Resume now or after a restart.")
        else:
            self.status.emit("Download cancelled; the partial file was removed.")
        self._download_ended()

    def _find_projector(self, listing: RepoFiles, model_path: Path) -> None:
        self.status.emit(f"Looking for the vision projector that fits {model_path.name}…")

        def work(_task: TaskHandle) -> RemoteModel | None:
            return matching_remote_projector(listing, load_model_spec(model_path))

        def found(match: RemoteModel | None) -> None:
            if match is None:
                self.status.emit(f"No vision projector in {listing.repo_id} fits {model_path.name}.")
                return
            self.start_download(listing.repo_id, match.first.filename, revision=listing.commit, listing=listing)

        self.tasks.submit(
            work, done=found, failed=lambda exc: self.error.emit(describe(exc)), key="hub-projector", owner=self
        )

    def _download_failed(self, exc: BaseException) -> None:
        if not isinstance(exc, (DownloadInterruptedError, NotEnoughSpaceError, HubUnreachableError)):
            self._download_key = None  # nothing to resume: a checksum failure, no access, ...
        self.download_failed.emit(exc)
        self.error.emit(describe(exc))
        self._download_ended()

    def _download_ended(self) -> None:
        self._download = None
        self._set_state(HubState.IDLE if self._download_key is None else HubState.PAUSED)
        self.refresh_pending()

    def pause_or_resume(self) -> None:
        if self._download is not None and self._control is not None:
            self._control.pause()
            self._set_state(HubState.PAUSING)
        elif self._download_key is not None:
            repo_id, filename = self._download_key
            listing = self.listing if self.listing and self.listing.repo_id == repo_id else None
            self.start_download(repo_id, filename, listing=listing)

    def cancel_download(self) -> None:
        if self._download is not None and self._control is not None:
            self._control.cancel()
            self._set_state(HubState.CANCELLING)
        elif self._download_key is not None:
            # Cancelling a paused download: discard what it kept.
            repo_id, filename = self._download_key
            for p in list_pending():
                if p.repo_id == repo_id and p.filename == filename:
                    _discard_pending(p)
            self._download_key = None
            self.download_discarded.emit()
            self.refresh_pending()
            self._set_state(HubState.IDLE)

    def refresh_pending(self) -> None:
        self.pending = [
            p for p in list_pending() if (p.repo_id, p.filename) != self._download_key or not self.downloading
        ]
        self.pending_changed.emit(self.pending)

    def resume_pending(self) -> None:
        if self.pending and not self.downloading:
            p = self.pending[0]
            self.start_download(p.repo_id, p.filename, revision=p.revision)

    # -- account ---------------------------------------------------------------------------------
    def check_token(self, token: str) -> None:
        """Check a pasted token with the Hub, then keep it in the keyring or the Hub's own token
        file (never in our settings)."""

        def work(_task: TaskHandle) -> tuple[str, str]:
            user = validate_token(token)
            return user, save_token(token)

        self.tasks.submit(work, done=self._token_ok, failed=lambda exc: self.token_rejected.emit(str(exc)), owner=self)

    def _token_ok(self, result: tuple[str, str]) -> None:
        user, where = result
        self.token_accepted.emit(user, where)
        self.account_changed.emit()
        self.status.emit(f"Signed in as {user}.")
        self._compute_badges()

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Pause a running download (its bytes stay for next time) and wait for it to stop."""
        task = self._download
        if task is not None and self._control is not None:
            self._control.pause()
            task.finished.wait(timeout_ms / 1000)
