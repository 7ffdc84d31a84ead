"""Saved KV caches for chats about documents, keyed by (model file, plan settings, documents).

Reading a long document costs minutes on a CPU; reopening a saved chat restores the cache that
held it instead, when the model file and the plan are unchanged. The key only picks a candidate:
the engine compares the restored tokens with the new prompt token by token, so a state that
differs anywhere (an edited system prompt, another chat on the same document) is still used only
up to where it agrees, never wrongly.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vrampilot.engine import Engine, EngineError, SavedState
from vrampilot.paths import data_dir
from vrampilot.planner.settings import Settings
from vrampilot.units import GIB

STATE_DIR = "kv-states"
DEFAULT_MAX_BYTES = 4 * GIB
# Thread counts change how fast the cache is computed, not what is in it.
_IGNORED_SETTINGS = ("n_threads", "n_threads_batch")


def state_key(model_path: str | Path, settings: Settings, doc_hashes: Sequence[str]) -> str:
    p = Path(model_path)
    st = p.stat()
    relevant = {k: v for k, v in settings.to_dict().items() if k not in _IGNORED_SETTINGS}
    blob = json.dumps(
        {
            "model": str(p.resolve()),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "settings": relevant,
            "documents": list(doc_hashes),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Restored:
    path: Path
    tokens: int
    seconds: float
    dropped: str = ""  # not used, and removed, because of this (a failed check); tokens is 0 then


RECORD_FORMAT = 1
STALE_PART_S = 600.0  # a `.part` older than this is a save that was killed, never one in progress


class KvStateStore:
    """State files under the user data dir, pruned oldest-first past `max_bytes`.

    llama.cpp's state file has no checksum, so each one gets a record of its own beside it
    (`<key>.json`: size, SHA-256, tokens), written after the file is complete and fsynced. A state
    whose record is missing or does not match (a flipped byte, a zeroed page, appended bytes, a
    save cut short) is dropped instead of restored; one that loads but gives non-finite logits
    (the engine tries it once) is dropped too. Killed saves leave `.part` files: they count
    against the cap and are removed once stale.
    """

    def __init__(self, root: Path | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root or data_dir() / STATE_DIR
        self.max_bytes = max_bytes
        self._remove_stale_parts()

    def path(self, key: str) -> Path:
        return self.root / f"{key}.llstate"

    def record_path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def save(self, engine: Engine, key: str) -> SavedState:
        """Save to a `.part`, check and fsync it, put it in place, then write its record."""
        final, part = self.path(key), self.root / f"{key}.llstate.part"
        saved = engine.save_state_file(part)  # a short save raises here: the old state stays as it was
        record = {
            "format": RECORD_FORMAT,
            "key": key,
            "bytes": saved.nbytes,
            "tokens": saved.tokens,
            "sha256": _sha256(part),
        }
        self.record_path(key).unlink(missing_ok=True)  # an old record must never vouch for the new file
        os.replace(part, final)
        _write_synced(self.record_path(key), json.dumps(record).encode())
        _sync_dir(self.root)
        self.prune(keep=final)
        return SavedState(final, saved.tokens, saved.nbytes, saved.seconds)

    def check(self, key: str) -> str:
        """Why the state for `key` must not be used, or "" when its record vouches for it."""
        path = self.path(key)
        try:
            record = json.loads(self.record_path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return "it has no integrity record (an older save, or one cut short)"
        except (OSError, ValueError):
            return "its integrity record is unreadable"
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("key") != key:
            return "its integrity record is for another state"
        size = path.stat().st_size
        if size != record.get("bytes"):
            return f"it is {size:,} bytes where {record.get('bytes'):,} bytes were saved"
        if _sha256(path) != record.get("sha256"):
            return "its contents changed since it was saved (checksum mismatch)"
        return ""

    def restore(self, engine: Engine, key: str) -> Restored | None:
        """Load the state for `key` into `engine`; None when there is none. A state that fails
        its checks, or does not load, is removed and reported in `dropped`."""
        path = self.path(key)
        if not path.is_file():
            return None
        t0 = time.perf_counter()
        problem = self.check(key)
        if not problem:
            try:
                n = engine.load_state_file(path)
            except EngineError as exc:
                problem = str(exc)
            else:
                path.touch()  # recently used: pruned last
                return Restored(path, n, time.perf_counter() - t0)
        self.drop(key)
        return Restored(path, 0, time.perf_counter() - t0, dropped=problem)

    def drop(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
        self.record_path(key).unlink(missing_ok=True)

    def prune(self, keep: Path | None = None) -> None:
        """Oldest first past the cap, counting killed saves' `.part` files as well."""
        if not self.root.is_dir():
            return
        files = sorted(
            [*self.root.glob("*.llstate"), *self.root.glob("*.llstate.part")],
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        total = 0
        for f in files:
            total += f.stat().st_size
            if total > self.max_bytes and f != keep:
                key = f.name.split(".llstate")[0]
                f.unlink(missing_ok=True)
                if f.suffix == ".llstate":
                    self.record_path(key).unlink(missing_ok=True)

    def _remove_stale_parts(self) -> None:
        if not self.root.is_dir():
            return
        now = time.time()
        for part in self.root.glob("*.part"):
            try:
                if now - part.stat().st_mtime > STALE_PART_S:
                    part.unlink()
            except OSError:
                continue


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_synced(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _sync_dir(folder: Path) -> None:
    """Make the renames durable (POSIX; Windows has no directory handles to sync)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
