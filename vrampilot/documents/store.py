"""Documents attached to saved chats, and what each question was given, in SQLite.

Kept in its own file beside the chats database (`documents.sqlite3`): extracted text is stored by
content hash, so a chat keeps working when the original file moves, and reopening a chat needs no
re-extraction. Turn records let retrieval re-send earlier turns exactly (see context.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from vrampilot.documents.blocks import Document
from vrampilot.paths import data_dir
from vrampilot.storage import migrate, open_database

if TYPE_CHECKING:
    from vrampilot.documents.context import ContextGiven

DB_FILE = "documents.sqlite3"
# Migrations by `PRAGMA user_version`, as the chats database (vrampilot.storage.db). The first one is
# written with IF NOT EXISTS: files made before versioning already hold these tables.
_MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS documents (sha256 TEXT PRIMARY KEY, doc_json TEXT NOT NULL, added_at REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS attachments (chat_id INTEGER NOT NULL, sha256 TEXT NOT NULL,
        added_at REAL NOT NULL, PRIMARY KEY (chat_id, sha256));
    CREATE TABLE IF NOT EXISTS turns (chat_id INTEGER NOT NULL, position INTEGER NOT NULL,
        given_json TEXT NOT NULL, PRIMARY KEY (chat_id, position));
    """,
)


class DocumentStore:
    def __init__(self, path: Path | None = None) -> None:
        path = path or data_dir() / DB_FILE
        # Written from the GUI thread and from workers; every call is one short statement.
        self._conn = open_database(path, check_same_thread=False)
        try:
            migrate(self._conn, path, _MIGRATIONS)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def attach(self, chat_id: int, doc: Document) -> None:
        now = time.time()
        self._conn.execute(
            "INSERT OR IGNORE INTO documents (sha256, doc_json, added_at) VALUES (?, ?, ?)",
            (doc.sha256, json.dumps(doc.to_dict(), ensure_ascii=False), now),
        )
        self._conn.execute(
            "INSERT OR IGNORE INTO attachments (chat_id, sha256, added_at) VALUES (?, ?, ?)", (chat_id, doc.sha256, now)
        )

    def detach(self, chat_id: int, sha256: str) -> None:
        self._conn.execute("DELETE FROM attachments WHERE chat_id = ? AND sha256 = ?", (chat_id, sha256))

    def documents(self, chat_id: int) -> list[Document]:
        rows = self._conn.execute(
            "SELECT d.doc_json FROM attachments a JOIN documents d ON d.sha256 = a.sha256 "
            "WHERE a.chat_id = ? ORDER BY a.added_at, a.rowid",
            (chat_id,),
        ).fetchall()
        return [Document.from_dict(json.loads(r[0])) for r in rows]

    def record_turn(self, chat_id: int, position: int, given: ContextGiven) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO turns (chat_id, position, given_json) VALUES (?, ?, ?)",
            (chat_id, position, json.dumps(given.to_dict(), ensure_ascii=False)),
        )

    def turns(self, chat_id: int) -> dict[int, ContextGiven]:
        # Imported here: context.py loads the tokenizer and the planner, which opening the
        # database at every start does not need.
        from vrampilot.documents.context import ContextGiven

        rows = self._conn.execute("SELECT position, given_json FROM turns WHERE chat_id = ?", (chat_id,)).fetchall()
        return {int(p): ContextGiven.from_dict(json.loads(j)) for p, j in rows}

    def forget_chat(self, chat_id: int) -> None:
        self._conn.execute("DELETE FROM attachments WHERE chat_id = ?", (chat_id,))
        self._conn.execute("DELETE FROM turns WHERE chat_id = ?", (chat_id,))
