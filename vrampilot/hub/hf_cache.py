"""The Hugging Face cache layout, shared with every other Hugging Face tool.

    <HF_HUB_CACHE>/models--org--name/blobs/<etag>                 file contents (etag = LFS sha256)
    <HF_HUB_CACHE>/models--org--name/snapshots/<commit>/<file>     relative symlinks to blobs
    <HF_HUB_CACHE>/models--org--name/refs/<branch>                 the commit a branch pointed to
    <HF_HUB_CACHE>/.locks/models--org--name/<etag>.lock            huggingface_hub's download lock

Our own files sit beside the blobs, where huggingface_hub's cache scanner ignores them:
`<etag>.vrampilot.part` (a resumable download) and `<etag>.quarantined-<sha>` (a file that failed
its checksum, with a .json note). We take the same lock huggingface_hub takes, so the two never
write one blob at the same time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from vrampilot.hub.env import hf_hub_cache
from vrampilot.hub.errors import HubError
from vrampilot.paths import long_path

PART_SUFFIX = ".vrampilot.part"
QUARANTINE_MARK = ".quarantined-"
# huggingface_hub 2.x writes `<etag>.<8 hex>.incomplete` and never resumes from it; a killed
# process leaves it behind. Older versions' `<etag>.incomplete` is resumable by them: left alone.
ORPHAN_RE = re.compile(r"^[0-9a-fA-F]{40,64}\.[0-9a-f]{8}\.incomplete$")
ORPHAN_MIN_AGE_S = 60.0


def repo_folder_name(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def repo_id_from_folder(name: str) -> str | None:
    if not name.startswith("models--"):
        return None
    return name.removeprefix("models--").replace("--", "/")


@dataclass(frozen=True)
class RepoCache:
    root: Path  # the HF hub cache
    repo_id: str

    @classmethod
    def for_repo(cls, repo_id: str, root: Path | None = None) -> RepoCache:
        return cls(root or hf_hub_cache(), repo_id)

    @property
    def storage(self) -> Path:
        return self.root / repo_folder_name(self.repo_id)

    @property
    def blobs(self) -> Path:
        return self.storage / "blobs"

    # The files written here: a repository's name (up to 96 characters each side of the slash) and
    # its folders and file names can take a path past Windows' limit (paths.long_path).
    def blob(self, etag: str) -> Path:
        return Path(long_path(self.blobs / etag))

    def part(self, etag: str) -> Path:
        return Path(long_path(self.blobs / f"{etag}{PART_SUFFIX}"))

    def pointer(self, commit: str, filename: str) -> Path:
        return Path(long_path(self.storage / "snapshots" / commit / Path(*filename.split("/"))))

    def ref(self, revision: str) -> Path:
        return Path(long_path(self.storage / "refs" / revision))

    def lock_path(self, etag: str) -> Path:
        return Path(long_path(self.root / ".locks" / repo_folder_name(self.repo_id) / f"{etag}.lock"))

    def commit_for(self, revision: str) -> str | None:
        try:
            return self.ref(revision).read_text().strip() or None
        except OSError:
            return None

    def write_ref(self, revision: str, commit: str) -> None:
        if revision == commit:
            return
        path = self.ref(revision)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.commit_for(revision) != commit:
            path.write_text(commit)  # no newline: huggingface_hub writes it this way

    @contextlib.contextmanager
    def locked(self, etag: str, *, wait_s: float = 1.0) -> Iterator[None]:
        path = self.lock_path(etag)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path), mode=0o664)
        try:
            lock.acquire(timeout=wait_s)
        except Timeout:
            raise HubError(
                f"another program is downloading this file of {self.repo_id} into the Hugging Face cache "
                "right now; wait for it to finish, then try again"
            ) from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                lock.release()


def link_pointer(blob: Path, pointer: Path) -> None:
    """Snapshot entry -> blob, as a relative symlink like huggingface_hub makes; a hard link or a
    copy where symlinks are not allowed (Windows without developer mode)."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
        return
    except OSError:
        pass
    try:
        os.link(blob, pointer)
    except OSError:
        shutil.copy2(blob, pointer)


def quarantine(path: Path, etag: str, actual_sha256: str, note: dict[str, Any]) -> Path:
    """Move a file that failed verification aside (same folder, so it is a rename) with a note."""
    target = path.with_name(f"{etag}{QUARANTINE_MARK}{actual_sha256[:16]}")
    os.replace(path, target)
    with contextlib.suppress(OSError):
        target.with_name(target.name + ".json").write_text(json.dumps(note, indent=2))
    return target


def _lock_is_free(lock_path: Path) -> bool:
    if not lock_path.exists():
        return True
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except (Timeout, OSError):
        return False
    with contextlib.suppress(OSError):
        lock.release()
    return True


def orphaned_incompletes(root: Path | None = None) -> list[Path]:
    """huggingface_hub's leftovers that no process is writing: lock free and untouched for a minute."""
    root = root or hf_hub_cache()
    out: list[Path] = []
    if not root.is_dir():
        return out
    now = time.time()
    for blob_dir in root.glob("models--*/blobs"):
        for path in blob_dir.iterdir():
            if not ORPHAN_RE.match(path.name):
                continue
            try:
                if now - path.stat().st_mtime < ORPHAN_MIN_AGE_S:
                    continue
            except OSError:
                continue
            etag = path.name.split(".", 1)[0]
            if _lock_is_free(root / ".locks" / blob_dir.parent.name / f"{etag}.lock"):
                out.append(path)
    return out


def clean_orphans(root: Path | None = None) -> tuple[int, int]:
    """Delete orphaned `.incomplete` files; returns (files removed, bytes freed)."""
    count = freed = 0
    for path in orphaned_incompletes(root):
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue
        count += 1
        freed += size
    return count, freed
