"""The app's SQLite file: one connection, schema migrations by `PRAGMA user_version`.

WAL mode with synchronous=NORMAL: each message is its own committed transaction, and a killed or
crashed app keeps every committed one (only a power cut may lose the last instants).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from vrampilot.paths import data_dir

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
)


class StorageError(Exception):
    pass


def default_db_path() -> Path:
    return data_dir() / DB_FILE


def connect(path: Path | None = None) -> sqlite3.Connection:
    """Open (and migrate) the database. A newer schema than this build knows is refused."""
    path = path or default_db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=5.0)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    _migrate(conn, path)
    return conn


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(_MIGRATIONS):
        raise StorageError(
            f"{path} was written by a newer VRAM Pilot (schema {version}); this one reads up to {len(_MIGRATIONS)}"
        )
    for i in range(version, len(_MIGRATIONS)):
        conn.execute("BEGIN")
        try:
            for statement in _statements(_MIGRATIONS[i]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {i + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
