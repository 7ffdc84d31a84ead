"""The model library: GGUF files the user opened or dropped, and folders the user added.

Only paths are stored; what a file holds is read from its header when listed (vrampilot.gguf), so the
list never goes stale when a file changes.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path

from vrampilot.storage.db import connect


class Library:
    def __init__(self, path: Path | None = None, conn: sqlite3.Connection | None = None) -> None:
        self._conn = conn or connect(path)

    def add_file(self, path: str | Path) -> None:
        self._conn.execute(
            "INSERT OR IGNORE INTO library_files (path, added_at) VALUES (?, ?)", (_stored(path), time.time())
        )

    def remove_file(self, path: str | Path) -> None:
        self._conn.execute("DELETE FROM library_files WHERE path = ?", (_stored(path),))

    def add_folder(self, path: str | Path) -> None:
        self._conn.execute(
            "INSERT OR IGNORE INTO library_folders (path, added_at) VALUES (?, ?)", (_stored(path), time.time())
        )

    def remove_folder(self, path: str | Path) -> None:
        self._conn.execute("DELETE FROM library_folders WHERE path = ?", (_stored(path),))

    def files(self) -> list[Path]:
        return [_path(r[0]) for r in self._conn.execute("SELECT path FROM library_files ORDER BY added_at")]

    def folders(self) -> list[Path]:
        return [_path(r[0]) for r in self._conn.execute("SELECT path FROM library_folders ORDER BY added_at")]

    def model_paths(self, max_depth: int = 3) -> list[Path]:
        """Every GGUF the library points at that exists now: files first, then folder contents.

        Split models are listed once, by their first part (llama.cpp opens the rest itself).
        """
        seen: set[Path] = set()
        out: list[Path] = []
        for p in self.files():
            if p.is_file() and p not in seen:
                seen.add(p)
                out.append(p)
        for folder in self.folders():
            for p in scan_folder(folder, max_depth):
                if p not in seen:
                    seen.add(p)
                    out.append(p)
        return out


def _stored(path: str | Path) -> str | bytes:
    """A path as SQLite keeps it: text, or the file system's bytes where they are not UTF-8 (SQLite's
    text is UTF-8; Python holds such bytes as surrogates, which no UTF-8 encoder takes)."""
    text = str(Path(path))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text)
    return text


def _path(value: str | bytes) -> Path:
    return Path(os.fsdecode(value) if isinstance(value, bytes) else value)


def scan_folder(folder: Path, max_depth: int = 3) -> list[Path]:
    """GGUF files under `folder` (depth-limited, symlink loops ignored), sorted by name."""
    found: list[Path] = []
    if not folder.is_dir():
        return found
    stack: list[tuple[Path, int]] = [(folder, 0)]
    visited: set[Path] = set()
    while stack:
        d, depth = stack.pop()
        try:
            real = d.resolve()
        except OSError:
            continue
        if real in visited:
            continue
        visited.add(real)
        try:
            entries = list(d.iterdir())
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir():
                    if depth < max_depth:
                        stack.append((e, depth + 1))
                elif e.suffix.lower() == ".gguf" and e.is_file() and _is_first_part(e.name):
                    found.append(e)
            except OSError:
                continue
    return sorted(found, key=lambda p: p.name.lower())


def _is_first_part(name: str) -> bool:
    # llama.cpp split files: model-00001-of-00003.gguf
    m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", name, re.IGNORECASE)
    return m is None or int(m.group(1)) == 1
