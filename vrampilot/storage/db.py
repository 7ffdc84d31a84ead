"""The app's SQLite file: one connection, schema migrations by `PRAGMA user_version`.

WAL mode with synchronous=NORMAL: each message is its own committed transaction, and a killed or
crashed app keeps every committed one (only a power cut may lose the last instants).

Two processes may open a new or older file at the same moment (two windows started together, the
CLI beside the app). The switch to WAL needs a moment alone with the file and SQLite does not wait
for it (its busy timeout does not apply): it is retried. A migration runs inside
`BEGIN IMMEDIATE`, which takes the write lock first, and re-reads the schema version under it, so
the second process finds the work done instead of creating a table twice.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from vrampilot.errors import UserError
from vrampilot.paths import cannot_write_text, data_dir, unwritable_reason

T = TypeVar("T")
LOCK_WAIT_S = 15.0

DB_FILE = "vrampilot.sqlite3"

_MIGRATIONS: tuple[str, ...] = (
    # 1: chats and their messages
    """
    CREATE TABLE chats (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        model_path TEXT,
        system_prompt TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL,
        stats_json TEXT,
        created_at REAL NOT NULL,
        UNIQUE (chat_id, position)
    );
    CREATE INDEX messages_chat ON messages(chat_id, position);
    CREATE INDEX chats_updated ON chats(updated_at DESC);
    """,
    # 2: the model library (files the user opened or dropped, folders the user added)
    """
    CREATE TABLE library_files (
        path TEXT PRIMARY KEY,
        added_at REAL NOT NULL
    );
    CREATE TABLE library_folders (
        path TEXT PRIMARY KEY,
        added_at REAL NOT NULL
    );
    """,
    # 3: the backend each chat replies with ('llama.cpp' or the experimental 'hybrid'). A column
    # with a default, so chats written by older builds read as llama.cpp chats, which they were.
    """
    ALTER TABLE chats ADD COLUMN backend TEXT NOT NULL DEFAULT 'llama.cpp';
    """,
    # 4: the images a message shows the model (storage/images.py: a JSON list of the copies kept in
    # the data folder by content hash). NULL for messages without images, and for every message
    # written by older builds, which kept none.
    """
    ALTER TABLE messages ADD COLUMN images_json TEXT;
    """,
    # 5: a tool round (vrampilot/tool_turn.py): an assistant message whose calls and their results
    # are this JSON ({"text", "calls": [...]}), stored as one row so a call is never kept without
    # its result. NULL for every other message.
    """
    ALTER TABLE messages ADD COLUMN tools_json TEXT;
    """,
)


class StorageError(UserError):
    """The chats database cannot be used as asked (a newer schema, a full or read-only disk)."""


def retry_locked(fn: Callable[[], T], wait_s: float = LOCK_WAIT_S) -> T:
    """Run `fn`, retrying while another process holds the file ("database is locked")."""
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def open_database(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """An autocommit connection in WAL mode; shared by the chats and the documents databases."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, timeout=5.0, check_same_thread=check_same_thread)
    except sqlite3.Error as exc:
        raise _unwritable(path) or StorageError(f"cannot open {path}: {exc}") from None
    try:
        retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
    except sqlite3.Error as exc:
        conn.close()
        raise _unwritable(path) or unusable(path, exc) from None
    return conn


def _unwritable(path: Path) -> StorageError | None:
    """A database in a folder the app cannot write: said as a first run there says it. SQLite
    itself says only "unable to open database file" (its WAL files cannot be made)."""
    reason = unwritable_reason(path.parent)
    return StorageError(cannot_write_text(path.parent, reason)) if reason else None


def unusable(path: Path, exc: sqlite3.Error, doing: str = "open") -> StorageError:
    """The error for a file SQLite refuses. A damaged file (random bytes, cut short) raises not
    `OperationalError` but its parent `DatabaseError`; either way the file is left exactly as it
    is, for the user to restore or recover, and the message says where it is and what to do."""
    if isinstance(exc, sqlite3.OperationalError):
        return StorageError(f"cannot {doing} {path}: {exc}")
    return StorageError(
        f"{path} is damaged or is not a VRAM Pilot database ({exc}); it was left as it is: move it "
        "aside (or restore a copy) and start again to begin with an empty one"
    )


def migrate(conn: sqlite3.Connection, path: Path, migrations: tuple[str, ...]) -> None:
    """Check the file is whole, then bring the schema to `len(migrations)`, once, even with other
    processes migrating too.

    A file damaged in its middle opens, and fails only when a query reaches the bad pages (the chats
    list, at the window's start): SQLite's quick_check reads every page once (0.09 s for 100 MB, page
    cache warm) so that such a file is refused before anything reads or writes it.
    """
    try:
        problem = conn.execute("PRAGMA quick_check").fetchone()[0]
        if problem != "ok":
            raise sqlite3.DatabaseError(problem)
        _migrate(conn, path, migrations)
    except sqlite3.Error as exc:
        raise unusable(path, exc, "prepare") from None


def _migrate(conn: sqlite3.Connection, path: Path, migrations: tuple[str, ...]) -> None:
    if conn.execute("PRAGMA user_version").fetchone()[0] == len(migrations):
        return
    retry_locked(lambda: conn.execute("BEGIN IMMEDIATE"))
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # under the lock: the truth
        if version > len(migrations):
            raise StorageError(
                f"{path} was written by a newer VRAM Pilot (schema {version}); this one reads up to "
                f"{len(migrations)}: the file was left as it is; open it with the newer version"
            )
        for i in range(version, len(migrations)):
            for statement in _statements(migrations[i]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {i + 1}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def default_db_path() -> Path:
    return data_dir() / DB_FILE


def connect(path: Path | None = None) -> sqlite3.Connection:
    """Open (and migrate) the database. A newer schema than this build knows is refused."""
    path = path or default_db_path()
    conn = open_database(path)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    try:
        migrate(conn, path, _MIGRATIONS)
    except BaseException:
        conn.close()
        raise
    return conn


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
