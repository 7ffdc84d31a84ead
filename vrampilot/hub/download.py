"""Downloads into the Hugging Face cache: resumable across restarts, verified by sha256, space-checked.

We do the transfer ourselves over plain HTTP rather than calling hf_hub_download, because
huggingface_hub 2.x (a) checks only the size, so a corrupted body is cached as good; (b) resumes
only inside one call and restarts from byte 0 after a crash; (c) switches to Xet when the Hub
advertises it. Here: bytes go to `<etag>.vrampilot.part` beside the blobs, each request asks for
`Range: bytes=<have>-`, the sha256 is computed as bytes arrive (re-reading the part once after a
restart), and only a file matching the Hub's LFS sha256 becomes a blob and a snapshot entry.
Metadata (commit, etag, CDN location) comes from huggingface_hub's own HEAD request.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO, Literal
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import get_hf_file_metadata, hf_hub_url

from vrampilot.hub.client import default_token, hub_call, raise_for_status, request_headers, token_arg, transfer_client
from vrampilot.hub.env import hf_hub_cache, hub_endpoint
from vrampilot.hub.errors import (
    ChecksumMismatchError,
    DownloadInterruptedError,
    FileNotInRepoError,
    HubError,
    NotEnoughSpaceError,
)
from vrampilot.hub.files import RemoteFile, RemoteModel, RepoFiles, list_repo_files
from vrampilot.hub.hf_cache import RepoCache, clean_orphans, link_pointer, quarantine
from vrampilot.hub.records import PendingDownload, drop_pending, mark_verified, save_pending, verified_sha256
from vrampilot.units import MIB, format_bytes

HASH_CHUNK_BYTES = 8 * MIB
# Left free on the disk beyond the file itself, so a finished download does not leave the system
# without room to write logs and temporary files.
DISK_MARGIN_BYTES = 16 * MIB
MAX_RETRIES = 3  # consecutive failures without progress before giving up (the part is kept)
RETRY_BASE_S = 0.5
PROGRESS_INTERVAL_S = 0.2
SPEED_WINDOW_S = 5.0
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


class DownloadState(StrEnum):
    CHECKING = "checking"  # metadata, disk space, re-reading a part from an earlier run
    DOWNLOADING = "downloading"
    VERIFYING = "verifying"  # sha256 of a file another tool put in the cache
    DONE = "done"
    PAUSED = "paused"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class DownloadProgress:
    repo_id: str
    filename: str  # the file being transferred now
    part: int  # 1-based, for split models
    parts: int
    done_bytes: int  # over all parts
    total_bytes: int
    speed_bps: float
    eta_s: float | None
    state: DownloadState
    resumed_bytes: int = 0  # already on disk when this run started

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 0.0

    def describe(self) -> str:
        """'1.20 GiB of 4.40 GiB · 35.2 MiB/s · 1 min 32 s left', the one text the CLI and GUI show."""
        text = f"{format_bytes(self.done_bytes)} of {format_bytes(self.total_bytes)}"
        if self.state is DownloadState.DOWNLOADING:
            if self.speed_bps > 0:
                text += f" · {format_bytes(self.speed_bps)}/s"
            if self.eta_s is not None:
                text += f" · {format_duration(self.eta_s)} left"
        elif self.state is not DownloadState.DONE:
            text += f" · {self.state.value}"
        if self.parts > 1:
            text = f"part {self.part} of {self.parts}: " + text
        return text


def format_duration(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


class DownloadControl:
    """Pause and cancel, set from any thread. A request also closes the open connection, so a
    stalled transfer stops at once instead of after the read timeout."""

    def __init__(self) -> None:
        self._pause = threading.Event()
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._response: httpx2.Response | None = None

    def pause(self) -> None:
        self._pause.set()
        self._abort()

    def cancel(self) -> None:
        self._cancel.set()
        self._abort()

    @property
    def paused(self) -> bool:
        return self._pause.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def stop_requested(self) -> bool:
        return self._pause.is_set() or self._cancel.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True when a stop was requested meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.stop_requested:
                return True
            time.sleep(min(0.05, end - time.monotonic()))
        return self.stop_requested

    def _attach(self, response: httpx2.Response | None) -> None:
        with self._lock:
            self._response = response

    def _abort(self) -> None:
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


@dataclass(frozen=True)
class DownloadResult:
    status: Literal["done", "paused", "cancelled"]
    repo_id: str
    model: RemoteModel
    paths: tuple[Path, ...]  # snapshot paths, first part first (the path to open)
    fetched_bytes: int  # bytes received from the network in this run
    total_bytes: int

    @property
    def path(self) -> Path | None:
        return self.paths[0] if self.paths else None


@dataclass
class _FilePlan:
    file: RemoteFile
    etag: str
    commit: str
    size: int
    url: str
    send_token: bool
    expected_sha256: str | None
    expected_git_sha1: str | None
    done: bool = False
    pointer: Path | None = None


@dataclass
class _Meter:
    """Progress reports, throttled, with speed over the last few seconds."""

    repo_id: str
    parts: int
    total_bytes: int
    callback: Callable[[DownloadProgress], None] | None
    resumed_bytes: int = 0
    _last: float = 0.0
    _samples: deque[tuple[float, int]] = field(default_factory=deque)

    def report(self, filename: str, part: int, done: int, state: DownloadState, force: bool = False) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.popleft()
        if not force and now - self._last < PROGRESS_INTERVAL_S:
            return
        self._last = now
        t0, d0 = self._samples[0]
        speed = (done - d0) / (now - t0) if now - t0 > 0.05 else 0.0
        eta = (self.total_bytes - done) / speed if speed > 0 else None
        self.callback(
            DownloadProgress(
                repo_id=self.repo_id,
                filename=filename,
                part=part,
                parts=self.parts,
                done_bytes=done,
                total_bytes=self.total_bytes,
                speed_bps=speed,
                eta_s=eta,
                state=state,
                resumed_bytes=self.resumed_bytes,
            )
        )


def _git_blob_sha1_init(size: int) -> hashlib._Hash:
    h = hashlib.sha1()
    h.update(f"blob {size}\0".encode())
    return h


class _Digests:
    """sha256 for LFS files; git's blob sha1 for small files stored in git itself."""

    def __init__(self, plan: _FilePlan) -> None:
        self.plan = plan
        self.reset()

    def reset(self) -> None:
        self.sha256 = hashlib.sha256()
        self.sha1 = _git_blob_sha1_init(self.plan.size) if self.plan.expected_git_sha1 else None

    def update(self, data: bytes | memoryview) -> None:
        self.sha256.update(data)
        if self.sha1 is not None:
            self.sha1.update(data)

    def mismatch(self) -> tuple[str, str] | None:
        """(expected, actual) when the content is not what the Hub describes."""
        actual = self.sha256.hexdigest()
        if self.plan.expected_sha256:
            return None if actual == self.plan.expected_sha256 else (self.plan.expected_sha256, actual)
        if self.sha1 is not None and self.plan.expected_git_sha1:
            got = self.sha1.hexdigest()
            return None if got == self.plan.expected_git_sha1 else (self.plan.expected_git_sha1, got)
        return None


def _hash_file(
    path: Path,
    digests: _Digests,
    upto: int,
    on_bytes: Callable[[int], None] | None = None,
    control: DownloadControl | None = None,
) -> bool:
    """Feed the first `upto` bytes of `path` to `digests`; False when stopped by the control."""
    done = 0
    with open(path, "rb") as fh:
        while done < upto:
            if control is not None and control.stop_requested:
                return False
            chunk = fh.read(min(HASH_CHUNK_BYTES, upto - done))
            if not chunk:
                break
            digests.update(chunk)
            done += len(chunk)
            if on_bytes is not None:
                on_bytes(done)
    return True


def _free_bytes(folder: Path) -> int:
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _is_64_hex(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value.lower())


class Downloader:
    """One model download (all parts of a split model). Build, then `run()` in a worker thread."""

    def __init__(
        self,
        repo_id: str,
        filename: str,
        *,
        revision: str | None = None,
        token: str | None = None,
        control: DownloadControl | None = None,
        on_progress: Callable[[DownloadProgress], None] | None = None,
        listing: RepoFiles | None = None,
        cache_root: Path | None = None,
    ) -> None:
        self.repo_id = repo_id
        self.filename = filename
        self.revision = revision or "main"
        self.token = token if token is not None else default_token()
        self.control = control or DownloadControl()
        self.on_progress = on_progress
        self.listing = listing
        self.cache = RepoCache.for_repo(repo_id, cache_root or hf_hub_cache())
        self.fetched_bytes = 0
        self._first = filename

    # -- planning -------------------------------------------------------------------------------

    def _model(self) -> tuple[RemoteModel, str | None]:
        listing = self.listing or list_repo_files(
            self.repo_id, revision=None if self.revision == "main" else self.revision, token=self.token
        )
        model = listing.find(self.filename)
        if model is None:
            raise FileNotInRepoError(f"{self.filename} is not a GGUF file of {self.repo_id}")
        if not model.complete:
            raise HubError(
                f"{self.filename} is part of a split model with {model.split_count} parts, but only "
                f"{len(model.files)} are in {self.repo_id}"
            )
        return model, listing.commit

    def _plan_file(self, f: RemoteFile, commit: str | None) -> _FilePlan:
        endpoint = hub_endpoint()
        url = hf_hub_url(self.repo_id, f.filename, revision=commit or self.revision, endpoint=endpoint)
        with hub_call(self.repo_id, token=self.token, filename=f.filename):
            meta = get_hf_file_metadata(url, token=token_arg(self.token), endpoint=endpoint)
        if not meta.etag or not meta.commit_hash:
            raise HubError(f"the server at {endpoint} is not a Hugging Face Hub (no ETag or X-Repo-Commit)")
        size = meta.size if meta.size is not None else f.size_bytes
        if f.size_bytes and size != f.size_bytes:
            raise HubError(
                f"the Hub lists {f.filename} as {f.size_bytes} bytes but serves {size}; the repository "
                "changed while we looked: refresh the file list"
            )
        expected = f.sha256 or (meta.etag if _is_64_hex(meta.etag) else None)
        location = meta.location or url
        return _FilePlan(
            file=f,
            etag=meta.etag,
            commit=meta.commit_hash,
            size=size,
            url=location,
            send_token=urlsplit(location).netloc == urlsplit(endpoint).netloc,
            expected_sha256=expected.lower() if expected else None,
            expected_git_sha1=None if expected else f.blob_id,
        )

    # -- the run ----------------------------------------------------------------------------------

    def run(self) -> DownloadResult:
        """Download, verify, and place the model. Returns done/paused/cancelled; raises HubError."""
        model, commit = self._model()
        first = self._first = model.first.filename
        total = model.total_bytes
        meter = _Meter(self.repo_id, len(model.files), total, self.on_progress)
        meter.report(first, 1, 0, DownloadState.CHECKING, force=True)
        clean_orphans(self.cache.root)
        plans = [self._plan_file(f, commit) for f in model.files]
        total = sum(p.size for p in plans)
        meter.total_bytes = total

        remaining = 0
        for p in plans:
            p.pointer = self.cache.pointer(p.commit, p.file.filename)
            p.done = self._already_placed(p)
            if not p.done:
                have = self._part_size(p)
                remaining += p.size - have
                meter.resumed_bytes += have
        self._check_space(remaining, total)
        placed = sum(p.size for p in plans if p.done)
        if meter.resumed_bytes or placed:
            meter.report(first, 1, placed + meter.resumed_bytes, DownloadState.CHECKING, force=True)

        save_pending(
            PendingDownload(self.repo_id, first, self.revision, total, tuple(self.cache.part(p.etag) for p in plans))
        )
        done_before = 0
        for i, p in enumerate(plans, start=1):
            if not p.done:
                status = self._download_file(p, i, done_before, meter)
                if status != "done":
                    if status == "cancelled":
                        self._discard(plans)
                    return DownloadResult(
                        status,  # type: ignore[arg-type]  # status is "paused" or "cancelled" here
                        self.repo_id,
                        model,
                        (),
                        self.fetched_bytes,
                        total,
                    )
            self.cache.write_ref(self.revision, p.commit)
            done_before += p.size
        drop_pending(self.repo_id, first, self.revision)
        meter.report(first, len(plans), total, DownloadState.DONE, force=True)
        return DownloadResult(
            "done", self.repo_id, model, tuple(p.pointer for p in plans if p.pointer), self.fetched_bytes, total
        )

    def _part_size(self, p: _FilePlan) -> int:
        try:
            have = self.cache.part(p.etag).stat().st_size
        except OSError:
            return 0
        return have if have <= p.size else 0

    def _check_space(self, remaining: int, total: int) -> None:
        if remaining <= 0:
            return
        free = _free_bytes(self.cache.blobs)
        if free < remaining + DISK_MARGIN_BYTES:
            raise NotEnoughSpaceError(
                f"not enough disk space for {self.filename}: it needs {format_bytes(remaining)} more "
                f"(of {format_bytes(total)}) plus {format_bytes(DISK_MARGIN_BYTES)} to spare, and "
                f"{self.cache.root} has {format_bytes(free)} free; free some space or set HF_HOME "
                "to a larger disk",
                needed_bytes=remaining + DISK_MARGIN_BYTES,
                free_bytes=free,
            )

    def _discard(self, plans: list[_FilePlan]) -> None:
        for p in plans:
            with contextlib.suppress(OSError):
                self.cache.part(p.etag).unlink()
        drop_pending(self.repo_id, plans[0].file.filename, self.revision)

    def _already_placed(self, p: _FilePlan) -> bool:
        """A blob from an earlier run or another tool: offered only after its checksum passed."""
        blob = self.cache.blob(p.etag)
        if not blob.is_file():
            return False
        with self.cache.locked(p.etag):
            if not blob.is_file():
                return False
            known = verified_sha256(blob)
            if known is None or (p.expected_sha256 is not None and known != p.expected_sha256):
                digests = _Digests(p)
                size = blob.stat().st_size
                if not _hash_file(blob, digests, size, control=self.control):
                    return False
                bad = digests.mismatch()
                if size != p.size:
                    bad = (f"{p.size} bytes", f"{size} bytes")
                if bad is not None:
                    # A damaged blob (huggingface_hub checks only sizes): set it aside, download again.
                    quarantine(blob, p.etag, digests.sha256.hexdigest(), self._note(p, bad))
                    if p.pointer is not None and p.pointer.is_symlink():
                        p.pointer.unlink()
                    return False
                mark_verified(blob, digests.sha256.hexdigest())
            assert p.pointer is not None
            good_link = p.pointer.is_symlink() and p.pointer.resolve() == blob.resolve()
            copied = p.pointer.is_file() and not p.pointer.is_symlink()  # systems without symlinks
            if not (good_link or copied):
                link_pointer(blob, p.pointer)
        return True

    def _note(self, p: _FilePlan, bad: tuple[str, str]) -> dict[str, str]:
        return {
            "repo_id": self.repo_id,
            "filename": p.file.filename,
            "commit": p.commit,
            "expected": bad[0],
            "actual": bad[1],
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    def _download_file(self, p: _FilePlan, index: int, done_before: int, meter: _Meter) -> str:
        part = self.cache.part(p.etag)
        part.parent.mkdir(parents=True, exist_ok=True)
        with self.cache.locked(p.etag):
            digests = _Digests(p)
            have = self._part_size(p)
            with open(part, "r+b" if part.exists() else "w+b") as fh:
                if have == 0:
                    fh.truncate(0)
                elif not _hash_file(
                    part,
                    digests,
                    have,
                    lambda n: meter.report(p.file.filename, index, done_before + n, DownloadState.CHECKING),
                    self.control,
                ):
                    return "cancelled" if self.control.cancelled else "paused"
                fh.seek(have)
                fh.truncate(have)
                status, have = self._transfer(p, fh, digests, have, index, done_before, meter)
                fh.flush()
                with contextlib.suppress(OSError):
                    os.fsync(fh.fileno())
            if status != "done":
                meter.report(p.file.filename, index, done_before + have, DownloadState(status), force=True)
                return status
            bad = digests.mismatch()
            if bad is not None:
                target = quarantine(part, p.etag, digests.sha256.hexdigest(), self._note(p, bad))
                drop_pending(self.repo_id, self._first, self.revision)
                raise ChecksumMismatchError(
                    f"{p.file.filename} from {self.repo_id} failed its checksum (expected sha256 {bad[0][:16]}…, "
                    f"got {bad[1][:16]}…): the file was damaged in transit or on the server and was not "
                    f"added to the library. It was moved to {target}; download it again.",
                    quarantine_path=target,
                    expected_sha256=bad[0],
                    actual_sha256=bad[1],
                )
            blob = self.cache.blob(p.etag)
            with contextlib.suppress(OSError):
                os.chmod(part, 0o644)
            os.replace(part, blob)
            mark_verified(blob, digests.sha256.hexdigest())
            assert p.pointer is not None
            link_pointer(blob, p.pointer)
        return "done"

    def _transfer(
        self, p: _FilePlan, fh: BinaryIO, digests: _Digests, have: int, index: int, done_before: int, meter: _Meter
    ) -> tuple[str, int]:
        name = p.file.filename
        failures = 0
        refreshed = False
        ctl = self.control
        while have < p.size:
            if ctl.stop_requested:
                return ("cancelled" if ctl.cancelled else "paused"), have
            headers = request_headers(self.token if p.send_token else None)
            headers["Range"] = f"bytes={have}-"
            progressed = False
            try:
                with transfer_client().stream("GET", p.url, headers=headers) as r:
                    ctl._attach(r)
                    if r.status_code == 416 and have == p.size:
                        break
                    if r.status_code in (401, 403) and not refreshed and not p.send_token:
                        # A signed CDN address expires (after a long pause): ask the Hub for a new one.
                        r.read()
                        refreshed = True
                        p.url = self._plan_file(p.file, p.commit).url
                        continue
                    if r.status_code >= 400:
                        r.read()
                        with hub_call(self.repo_id, token=self.token, filename=name):
                            raise_for_status(r)
                    if r.status_code == 200 and have > 0:
                        # The server ignored Range: start over rather than append the beginning twice.
                        fh.seek(0)
                        fh.truncate(0)
                        digests.reset()
                        have = 0
                    elif r.status_code == 206:
                        start = _content_range_start(r.headers.get("Content-Range"))
                        if start != have:
                            raise HubError(f"the server sent bytes from {start} when asked for {have}; try again")
                    # No chunk_size: httpx would hold back a partial chunk, lost if the connection drops.
                    for chunk in r.iter_bytes():
                        if ctl.stop_requested:
                            break
                        room = p.size - have
                        if len(chunk) > room:
                            chunk = chunk[:room]
                        try:
                            fh.write(chunk)
                        except OSError as exc:
                            self._disk_full(exc, fh, p, have)
                            raise
                        digests.update(chunk)
                        have += len(chunk)
                        self.fetched_bytes += len(chunk)
                        progressed = True
                        meter.report(name, index, done_before + have, DownloadState.DOWNLOADING)
                        if have >= p.size:
                            break
            except HubError:
                raise
            except Exception as exc:
                if ctl.stop_requested:
                    continue  # our own pause/cancel closed the connection
                if not isinstance(exc, (httpx2.TransportError, httpx2.StreamError)):
                    raise
                failures = 0 if progressed else failures + 1
                if failures > MAX_RETRIES:
                    raise DownloadInterruptedError(
                        f"lost the connection to the Hub while downloading {name} ({type(exc).__name__}); "
                        f"{format_bytes(done_before + have)} of {format_bytes(meter.total_bytes)} are kept: "
                        "download again to resume",
                        have_bytes=done_before + have,
                    ) from None
                ctl.wait(RETRY_BASE_S * 2 ** max(failures - 1, 0))
                continue
            finally:
                ctl._attach(None)
            if not progressed and have < p.size and not ctl.stop_requested:
                failures += 1
                if failures > MAX_RETRIES:
                    raise DownloadInterruptedError(
                        f"the Hub keeps ending the transfer of {name} early; "
                        f"{format_bytes(done_before + have)} are kept: download again to resume",
                        have_bytes=done_before + have,
                    )
        if ctl.stop_requested and have < p.size:
            return ("cancelled" if ctl.cancelled else "paused"), have
        return "done", have

    def _disk_full(self, exc: OSError, fh: BinaryIO, p: _FilePlan, have: int) -> None:
        """Keep exactly the bytes that were hashed, then say what to do (the part resumes later)."""
        if exc.errno not in _DISK_FULL:
            return
        with contextlib.suppress(OSError):
            fh.seek(have)
            fh.truncate(have)
        raise NotEnoughSpaceError(
            f"the disk filled up while downloading {p.file.filename}: {format_bytes(have)} of "
            f"{format_bytes(p.size)} are kept in {self.cache.root}; free {format_bytes(p.size - have)} "
            "and download again to resume",
            needed_bytes=p.size - have,
            free_bytes=0,
        ) from None


def _content_range_start(value: str | None) -> int | None:
    # "bytes 100-199/1000"
    if not value or not value.startswith("bytes "):
        return None
    try:
        return int(value[6:].split("-", 1)[0])
    except ValueError:
        return None


def download_model(
    repo_id: str,
    filename: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    control: DownloadControl | None = None,
    on_progress: Callable[[DownloadProgress], None] | None = None,
    listing: RepoFiles | None = None,
) -> DownloadResult:
    """Download the model `filename` belongs to (every part of a split model) into the HF cache."""
    return Downloader(
        repo_id, filename, revision=revision, token=token, control=control, on_progress=on_progress, listing=listing
    ).run()
