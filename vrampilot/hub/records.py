"""What we remember between runs: downloads in progress (to resume after a restart) and files whose
sha256 we checked (so a 20 GB file is hashed once, not on every start). Plain JSON under the app's
data folder; one file per pending download so the GUI and the CLI never overwrite each other."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from vrampilot.paths import data_dir


def _hub_dir() -> Path:
    path = data_dir() / "hub"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# verified files


def _verified_path() -> Path:
    return _hub_dir() / "verified.json"


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def mark_verified(path: Path, sha256: str) -> None:
    stamp = _stamp(path)
    if stamp is None:
        return
    vp = _verified_path()
    with FileLock(str(vp) + ".lock"):
        data = _read_json(vp) or {}
        data[str(path.resolve())] = {"sha256": sha256, "size": stamp[0], "mtime_ns": stamp[1]}
        _write_json(vp, data)


def verified_sha256(path: Path) -> str | None:
    """The sha256 we computed for `path`, if the file has not changed since."""
    stamp = _stamp(path)
    if stamp is None:
        return None
    entry = (_read_json(_verified_path()) or {}).get(str(path.resolve()))
    if not isinstance(entry, dict) or (entry.get("size"), entry.get("mtime_ns")) != stamp:
        return None
    sha = entry.get("sha256")
    return sha if isinstance(sha, str) else None


# ---------------------------------------------------------------------------------------------
# pending downloads


@dataclass(frozen=True)
class PendingDownload:
    repo_id: str
    filename: str  # the model's first file (a split model resumes as a whole)
    revision: str
    total_bytes: int
    part_paths: tuple[Path, ...]  # our .part files, existing or not yet started

    @property
    def have_bytes(self) -> int:
        total = 0
        for p in self.part_paths:
            with contextlib.suppress(OSError):
                total += p.stat().st_size
        return total

    @property
    def key(self) -> str:
        return pending_key(self.repo_id, self.filename, self.revision)


def pending_key(repo_id: str, filename: str, revision: str) -> str:
    return hashlib.sha1(f"{repo_id}\0{filename}\0{revision}".encode()).hexdigest()[:20]


def _pending_dir() -> Path:
    path = _hub_dir() / "pending"
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_pending(p: PendingDownload) -> None:
    _write_json(
        _pending_dir() / f"{p.key}.json",
        {
            "repo_id": p.repo_id,
            "filename": p.filename,
            "revision": p.revision,
            "total_bytes": p.total_bytes,
            "part_paths": [str(x) for x in p.part_paths],
        },
    )


def drop_pending(repo_id: str, filename: str, revision: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (_pending_dir() / f"{pending_key(repo_id, filename, revision)}.json").unlink()


def list_pending() -> list[PendingDownload]:
    """Downloads that were paused, cut or interrupted by a restart, oldest first."""
    out: list[tuple[float, PendingDownload]] = []
    for path in _pending_dir().glob("*.json"):
        data = _read_json(path)
        if not isinstance(data, dict):
            continue
        try:
            p = PendingDownload(
                repo_id=str(data["repo_id"]),
                filename=str(data["filename"]),
                revision=str(data["revision"]),
                total_bytes=int(data["total_bytes"]),
                part_paths=tuple(Path(x) for x in data.get("part_paths", ())),
            )
        except (KeyError, TypeError, ValueError):
            continue
        out.append((path.stat().st_mtime, p))
    return [p for _, p in sorted(out, key=lambda t: t[0])]
