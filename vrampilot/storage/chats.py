"""Chats and their messages in SQLite: list, rename, delete, search, export.

Every write is its own transaction, committed before the call returns: the user's message is on
disk before the model starts, the reply as soon as it ends, so a kill loses at most the reply in
progress.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrampilot.storage.db import StorageError, connect
from vrampilot.storage.images import StoredImage
from vrampilot.tool_turn import ToolRound

ROLES = ("system", "user", "assistant")
# What replies a chat: llama.cpp (the engine), or the experimental hybrid-cache backend on torch
# (vrampilot.hybrid). Stored per chat so that reopening a chat keeps its backend.
BACKEND_LLAMA = "llama.cpp"
BACKEND_HYBRID = "hybrid"
BACKENDS = (BACKEND_LLAMA, BACKEND_HYBRID)
# "hybrid:NAME": the hybrid backend with its named config NAME (vrampilot.hybrid.config), where
# plain "hybrid" is its default config. Storage checks the form only; what NAME means lives above.
_HYBRID_CONFIG = re.compile(r"hybrid:[a-z0-9][a-z0-9-]{0,39}")
DEFAULT_TITLE = "New chat"
# A chat's `updated_at`: the clock, but never before the newest chat's (plus a millisecond). The list
# is in order of use, and a clock set back (a flat CMOS battery says 1971) or once set far ahead
# (2100, then corrected) must not put the chat just written below the others.
_TOUCHED = "MAX(?, (SELECT COALESCE(MAX(updated_at), 0) + 0.001 FROM chats))"
TITLE_CHARS = 60


@dataclass(frozen=True)
class StoredMessage:
    id: int
    position: int
    role: str
    content: str
    stats: dict[str, Any] | None = None
    images: tuple[StoredImage, ...] = ()  # shown to the model before the text (storage/images.py)
    tool_round: ToolRound | None = None  # an assistant message that called tools, with their results


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    model_path: str | None
    updated_at: float
    n_messages: int
    snippet: str = ""  # for search results: where the text matched


@dataclass(frozen=True)
class Chat:
    id: int
    title: str
    model_path: str | None
    system_prompt: str
    created_at: float
    updated_at: float
    messages: tuple[StoredMessage, ...] = field(default=())
    backend: str = BACKEND_LLAMA


def title_from(text: str) -> str:
    """A chat title from its first message: the first line, shortened at a word. Only the first:
    "Fix this list:" then its items would read as one run-on line."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(first.split())
    if len(line) <= TITLE_CHARS:
        return line or DEFAULT_TITLE
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0]
    return (cut or line[:TITLE_CHARS]) + "…"


def is_backend(backend: str) -> bool:
    return backend in BACKENDS or _HYBRID_CONFIG.fullmatch(backend) is not None


def is_hybrid(backend: str) -> bool:
    """The hybrid backend, with any config."""
    return backend == BACKEND_HYBRID or _HYBRID_CONFIG.fullmatch(backend) is not None


def hybrid_config(backend: str) -> str:
    """The config a hybrid backend key names ("default" for plain "hybrid")."""
    return backend.split(":", 1)[1] if ":" in backend else "default"


def _check_backend(backend: str) -> None:
    if not is_backend(backend):
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} or hybrid:CONFIG")


@contextlib.contextmanager
def _writing(what: str) -> Iterator[None]:
    """A failed write (full or read-only disk, a locked file) as a StorageError the user can act on."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "full" in text:
            raise StorageError(f"could not save {what}: the disk is full ({text})") from None
        raise StorageError(f"could not save {what}: {text}") from None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class ChatStore:
    def __init__(self, path: Path | None = None, conn: sqlite3.Connection | None = None) -> None:
        self._conn = conn or connect(path)

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        self._conn.close()

    # -- chats ---------------------------------------------------------------------------------
    def create_chat(
        self,
        title: str = DEFAULT_TITLE,
        model_path: str | None = None,
        system_prompt: str = "",
        backend: str = BACKEND_LLAMA,
    ) -> Chat:
        _check_backend(backend)
        now = time.time()
        with _writing("the new chat"), self._tx():
            cur = self._conn.execute(
                "INSERT INTO chats (title, model_path, system_prompt, created_at, updated_at, backend) "
                f"VALUES (?, ?, ?, ?, {_TOUCHED}, ?)",
                (title, model_path, system_prompt, now, now, backend),
            )
            chat_id = int(cur.lastrowid or 0)
            touched = self._conn.execute("SELECT updated_at FROM chats WHERE id = ?", (chat_id,)).fetchone()[0]
        return Chat(chat_id, title, model_path, system_prompt, now, touched, backend=backend)

    def list_chats(self) -> list[ChatSummary]:
        rows = self._conn.execute(
            """SELECT c.id, c.title, c.model_path, c.updated_at, COUNT(m.id) AS n
               FROM chats c LEFT JOIN messages m ON m.chat_id = c.id
               GROUP BY c.id ORDER BY c.updated_at DESC, c.id DESC"""
        ).fetchall()
        return [ChatSummary(r["id"], r["title"], r["model_path"], r["updated_at"], r["n"]) for r in rows]

    def get_chat(self, chat_id: int) -> Chat:
        row = self._conn.execute("SELECT * FROM chats WHERE id = ?", (chat_id,)).fetchone()
        if row is None:
            raise KeyError(f"no chat {chat_id}")
        return Chat(
            row["id"],
            row["title"],
            row["model_path"],
            row["system_prompt"],
            row["created_at"],
            row["updated_at"],
            tuple(self.messages(chat_id)),
            # A value this build does not know (written by a newer one) reads as the default.
            row["backend"] if is_backend(row["backend"]) else BACKEND_LLAMA,
        )

    def messages(self, chat_id: int) -> list[StoredMessage]:
        rows = self._conn.execute(
            "SELECT id, position, role, content, stats_json, images_json, tools_json FROM messages WHERE chat_id = ? "
            "ORDER BY position",
            (chat_id,),
        ).fetchall()
        return [
            StoredMessage(
                r["id"],
                r["position"],
                r["role"],
                r["content"],
                json.loads(r["stats_json"]) if r["stats_json"] else None,
                _images_from(r["images_json"]),
                _round_from(r["tools_json"]),
            )
            for r in rows
        ]

    def rename(self, chat_id: int, title: str) -> None:
        title = title.strip() or DEFAULT_TITLE
        self._update_chat(chat_id, "title = ?", (title,))

    def set_system_prompt(self, chat_id: int, text: str) -> None:
        self._update_chat(chat_id, "system_prompt = ?", (text,))

    def set_model(self, chat_id: int, model_path: str | None) -> None:
        self._update_chat(chat_id, "model_path = ?", (model_path,))

    def set_backend(self, chat_id: int, backend: str) -> None:
        _check_backend(backend)
        self._update_chat(chat_id, "backend = ?", (backend,))

    def delete(self, chat_id: int) -> None:
        with _writing("the deletion"):
            self._conn.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    def _update_chat(self, chat_id: int, assignment: str, params: Sequence[Any]) -> None:
        with _writing("the chat"):
            cur = self._conn.execute(
                f"UPDATE chats SET {assignment}, updated_at = {_TOUCHED} WHERE id = ?", (*params, time.time(), chat_id)
            )
        if cur.rowcount == 0:
            raise KeyError(f"no chat {chat_id}")

    # -- messages ------------------------------------------------------------------------------
    def add_message(
        self,
        chat_id: int,
        role: str,
        content: str,
        stats: dict[str, Any] | None = None,
        images: Sequence[StoredImage] = (),
        tool_round: ToolRound | None = None,
    ) -> StoredMessage:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        tools_json = json.dumps(tool_round.to_dict(), ensure_ascii=False) if tool_round is not None else None
        now = time.time()
        with _writing("the message"), self._tx():
            pos = self._conn.execute(
                "SELECT COALESCE(MAX(position) + 1, 0) FROM messages WHERE chat_id = ?", (chat_id,)
            ).fetchone()[0]
            cur = self._conn.execute(
                "INSERT INTO messages (chat_id, position, role, content, stats_json, created_at, images_json, tools_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    chat_id,
                    pos,
                    role,
                    content,
                    json.dumps(stats) if stats else None,
                    now,
                    _images_json(images),
                    tools_json,
                ),
            )
            row = self._conn.execute("SELECT title FROM chats WHERE id = ?", (chat_id,)).fetchone()
            if row is not None and row["title"] == DEFAULT_TITLE and role == "user":
                self._conn.execute("UPDATE chats SET title = ? WHERE id = ?", (title_from(content), chat_id))
            self._conn.execute(f"UPDATE chats SET updated_at = {_TOUCHED} WHERE id = ?", (now, chat_id))
        return StoredMessage(int(cur.lastrowid or 0), pos, role, content, stats, tuple(images), tool_round)

    def update_message(
        self,
        message_id: int,
        content: str,
        stats: dict[str, Any] | None = None,
        images: Sequence[StoredImage] | None = None,
    ) -> None:
        """`images`: None keeps the message's images as they are."""
        with _writing("the message"):
            if images is None:
                cur = self._conn.execute(
                    "UPDATE messages SET content = ?, stats_json = ? WHERE id = ?",
                    (content, json.dumps(stats) if stats else None, message_id),
                )
            else:
                cur = self._conn.execute(
                    "UPDATE messages SET content = ?, stats_json = ?, images_json = ? WHERE id = ?",
                    (content, json.dumps(stats) if stats else None, _images_json(images), message_id),
                )
        if cur.rowcount == 0:
            raise KeyError(f"no message {message_id}")

    def truncate(self, chat_id: int, keep: int) -> None:
        """Keep the first `keep` messages (edit and regenerate continue from an earlier point)."""
        with _writing("the chat"), self._tx():
            self._conn.execute("DELETE FROM messages WHERE chat_id = ? AND position >= ?", (chat_id, keep))
            self._conn.execute(f"UPDATE chats SET updated_at = {_TOUCHED} WHERE id = ?", (time.time(), chat_id))

    # -- search and export ---------------------------------------------------------------------
    def search(self, text: str, limit: int = 50) -> list[ChatSummary]:
        """Chats whose title or any message contains `text` (case-insensitive), newest first."""
        needle = text.strip()
        if not needle:
            return self.list_chats()
        pattern = f"%{_escape_like(needle)}%"
        rows = self._conn.execute(
            r"""SELECT c.id, c.title, c.model_path, c.updated_at,
                      (SELECT COUNT(*) FROM messages WHERE chat_id = c.id) AS n,
                      (SELECT content FROM messages WHERE chat_id = c.id AND content LIKE ? ESCAPE '\'
                       ORDER BY position LIMIT 1) AS hit
               FROM chats c
               WHERE c.title LIKE ? ESCAPE '\'
                  OR EXISTS (SELECT 1 FROM messages WHERE chat_id = c.id AND content LIKE ? ESCAPE '\')
               ORDER BY c.updated_at DESC LIMIT ?""",
            (pattern, pattern, pattern, limit),
        ).fetchall()
        return [
            ChatSummary(r["id"], r["title"], r["model_path"], r["updated_at"], r["n"], _snippet(r["hit"] or "", needle))
            for r in rows
        ]

    def export_json(self, chat_id: int) -> dict[str, Any]:
        chat = self.get_chat(chat_id)
        return {
            "title": chat.title,
            "model": chat.model_path,
            "system_prompt": chat.system_prompt,
            "backend": chat.backend,
            "created_at": chat.created_at,
            "updated_at": chat.updated_at,
            "messages": [
                {
                    "role": m.role,
                    "content": m.content,
                    **({"images": [i.to_dict() for i in m.images]} if m.images else {}),
                    **({"tool_calls": m.tool_round.to_dict()["calls"]} if m.tool_round else {}),
                    **({"stats": m.stats} if m.stats else {}),
                }
                for m in chat.messages
            ],
        }

    def export_markdown(self, chat_id: int) -> str:
        chat = self.get_chat(chat_id)
        lines = [f"# {chat.title}", ""]
        if chat.model_path:
            lines += [f"Model: `{Path(chat.model_path).name}`", ""]
        if is_hybrid(chat.backend):
            lines += [f"Backend: experimental hybrid KV cache (torch), config {hybrid_config(chat.backend)}", ""]
        if chat.system_prompt:
            lines += ["## System", "", chat.system_prompt, ""]
        names = {"user": "User", "assistant": "Assistant", "system": "System"}
        for m in chat.messages:
            shown = [f"[image: {i.name or i.file_name}]" for i in m.images]
            lines += [f"## {names[m.role]}", "", *shown, *([""] if shown else []), m.content, ""]
            if m.tool_round is not None:
                lines += _markdown_round(m.tool_round)
        return "\n".join(lines).rstrip() + "\n"

    def _tx(self) -> _Transaction:
        return _Transaction(self._conn)


class _Transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type:
            self._conn.execute("ROLLBACK")
            return
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error:
            # A COMMIT that fails (disk full) can leave the transaction open: close it, or every
            # later write fails with "cannot start a transaction within a transaction".
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise


def _images_json(images: Sequence[StoredImage]) -> str | None:
    return json.dumps([i.to_dict() for i in images]) if images else None


def _images_from(raw: str | None) -> tuple[StoredImage, ...]:
    if not raw:
        return ()
    try:
        return tuple(StoredImage.from_dict(d) for d in json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return ()  # written by a newer build in a form this one does not know: shown without images


def _round_from(raw: str | None) -> ToolRound | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return ToolRound.from_dict(data) if isinstance(data, dict) else None


def _markdown_round(rnd: ToolRound) -> list[str]:
    """A round's calls in the Markdown export: each call, then its result as a fenced block (a
    result is untrusted text: fenced, it cannot turn into Markdown of the export's own)."""
    out: list[str] = []
    for step in rnd.steps:
        out += [f"**Tool call** {step.line()}", ""]
        fence = "`" * max(3, _longest_backticks(step.result) + 1)
        out += [fence, step.result, fence, ""]
    return out


def _longest_backticks(text: str) -> int:
    runs = re.findall(r"`+", text)
    return max((len(r) for r in runs), default=0)


def _snippet(text: str, needle: str, width: int = 40) -> str:
    i = text.lower().find(needle.lower())
    if i < 0:
        return ""
    start = max(0, i - width)
    end = min(len(text), i + len(needle) + width)
    out = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + out + ("…" if end < len(text) else "")
