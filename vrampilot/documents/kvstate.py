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
        {"model": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "settings": relevant,
         "documents": list(doc_hashes)},
        sort_keys=True,
    )  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Restored:
    path: Path
    tokens: int
    seconds: float


class KvStateStore:
    """State files under the user data dir, pruned oldest-first past `max_bytes`."""

    def __init__(self, root: Path | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root or data_dir() / STATE_DIR
        self.max_bytes = max_bytes

    def path(self, key: str) -> Path:
        return self.root / f"{key}.llstate"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def save(self, engine: Engine, key: str) -> SavedState:
        saved = engine.save_state_file(self.path(key))
        self.prune(keep=saved.path)
        return saved

    def restore(self, engine: Engine, key: str) -> Restored | None:
        """Load the state for `key` into `engine`; None when there is none or it does not load
        (then the file is dropped: it can never load into this model and plan)."""
        path = self.path(key)
        if not path.is_file():
            return None
        t0 = time.perf_counter()
        try:
            n = engine.load_state_file(path)
        except EngineError:
            path.unlink(missing_ok=True)
            return None
        path.touch()  # recently used: pruned last
        return Restored(path, n, time.perf_counter() - t0)

    def prune(self, keep: Path | None = None) -> None:
        if not self.root.is_dir():
            return
        files = sorted(self.root.glob("*.llstate"), key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for f in files:
            total += f.stat().st_size
            if total > self.max_bytes and f != keep:
                f.unlink(missing_ok=True)
