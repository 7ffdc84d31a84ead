"""Chats in SQLite: the operations the chat list offers, export, and surviving a kill."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vrampilot.storage import ChatStore, StorageError, connect, title_from
from vrampilot.storage.db import DB_FILE


@pytest.fixture
def store(tmp_path: Path) -> ChatStore:
    return ChatStore(tmp_path / DB_FILE)


def test_messages_keep_their_order_and_stats(store: ChatStore) -> None:
    chat = store.create_chat(model_path="/m/a.gguf", system_prompt="Be brief.")
    store.add_message(chat.id, "user", "What is 2+2?")
    store.add_message(chat.id, "assistant", "4", stats={"decode_tps": 50.0})
    loaded = store.get_chat(chat.id)
    assert [(m.position, m.role, m.content) for m in loaded.messages] == [
        (0, "user", "What is 2+2?"),
        (1, "assistant", "4"),
    ]
    assert loaded.messages[1].stats == {"decode_tps": 50.0}
    assert loaded.system_prompt == "Be brief."
    assert loaded.title == "What is 2+2?"  # titled by the first user message


def test_list_is_newest_first_and_counts_messages(store: ChatStore) -> None:
    a = store.create_chat()
    b = store.create_chat()
    store.add_message(a.id, "user", "older chat, touched last")
    listed = store.list_chats()
    assert [c.id for c in listed] == [a.id, b.id]
    assert listed[0].n_messages == 1 and listed[1].n_messages == 0


def test_rename_delete_and_missing_chat(store: ChatStore) -> None:
    chat = store.create_chat()
    store.add_message(chat.id, "user", "hello")
    store.rename(chat.id, "  Greetings  ")
    assert store.get_chat(chat.id).title == "Greetings"
    store.delete(chat.id)
    assert store.list_chats() == []
    # Messages go with their chat (foreign key cascade).
    assert store.connection.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    with pytest.raises(KeyError):
        store.get_chat(chat.id)
    with pytest.raises(KeyError):
        store.rename(chat.id, "x")


def test_truncate_supports_edit_and_regenerate(store: ChatStore) -> None:
    chat = store.create_chat()
    for role, text in [("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d")]:
        store.add_message(chat.id, role, text)
    store.truncate(chat.id, 2)
    store.add_message(chat.id, "user", "c edited")
    assert [m.content for m in store.messages(chat.id)] == ["a", "b", "c edited"]
    assert [m.position for m in store.messages(chat.id)] == [0, 1, 2]


def test_search_finds_title_and_content_and_escapes_wildcards(store: ChatStore) -> None:
    a = store.create_chat()
    store.add_message(a.id, "user", "Tell me about the Rust borrow checker")
    store.add_message(a.id, "assistant", "It enforces 100% memory safety rules at compile time.")
    b = store.create_chat(title="Cooking")
    store.add_message(b.id, "user", "pasta recipes")
    hits = store.search("BORROW")
    assert [h.id for h in hits] == [a.id]
    assert "borrow" in hits[0].snippet.lower()
    assert [h.id for h in store.search("100%")] == [a.id]
    assert [h.id for h in store.search("%")] == [a.id]  # a literal percent sign, not a wildcard
    assert [h.id for h in store.search("cook")] == [b.id]
    assert store.search("nowhere to be found") == []
    assert {h.id for h in store.search("  ")} == {a.id, b.id}


def test_export_markdown_and_json(store: ChatStore) -> None:
    chat = store.create_chat(model_path="/models/smol.gguf", system_prompt="Be kind.")
    store.add_message(chat.id, "user", "Show code")
    store.add_message(chat.id, "assistant", "```python\nprint(1)\n```", stats={"decode_tps": 12.5})
    md = store.export_markdown(chat.id)
    assert md.startswith("# Show code\n")
    assert "Model: `smol.gguf`" in md
    assert "## System\n\nBe kind." in md
    assert "## User\n\nShow code" in md
    assert "## Assistant\n\n```python\nprint(1)\n```" in md
    data = store.export_json(chat.id)
    json.dumps(data)
    assert data["system_prompt"] == "Be kind."
    assert data["messages"][1] == {
        "role": "assistant",
        "content": "```python\nprint(1)\n```",
        "stats": {"decode_tps": 12.5},
    }


def test_bad_role_is_refused(store: ChatStore) -> None:
    chat = store.create_chat()
    with pytest.raises(ValueError):
        store.add_message(chat.id, "tool", "x")


def test_title_from_long_text() -> None:
    assert title_from("  short\tquestion ") == "short question"
    # The first line only: a list's items never run into its heading.
    assert title_from("\n  Fix this list:\napples 3\npears 2\n") == "Fix this list:"
    long = "word " * 40
    t = title_from(long)
    assert t.endswith("…") and len(t) <= 61
    assert title_from("   ") == "New chat"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / DB_FILE
    connect(path).close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(StorageError, match="newer"):
        connect(path)


def test_a_version_2_database_gains_the_backend_column_and_keeps_its_chats(tmp_path: Path) -> None:
    """A database written before chats had a backend (schema 2) opens, migrates, and reads as llama.cpp."""
    from tests.storage.old_db import old_database
    from vrampilot.storage.db import _MIGRATIONS

    path = tmp_path / DB_FILE
    raw = old_database(path, 2)
    raw.execute(
        "INSERT INTO chats (title, model_path, system_prompt, created_at, updated_at) "
        "VALUES ('Old chat', '/m/a.gguf', '', 1.0, 2.0)"
    )
    raw.execute("INSERT INTO messages (chat_id, position, role, content, created_at) VALUES (1, 0, 'user', 'hi', 1.0)")
    raw.commit()
    raw.close()

    store = ChatStore(path)
    try:
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == len(_MIGRATIONS) >= 3
        old = store.get_chat(1)
        assert (old.title, old.backend, [m.content for m in old.messages]) == ("Old chat", "llama.cpp", ["hi"])
        new = store.create_chat()
        assert store.get_chat(new.id).backend == "llama.cpp"
    finally:
        store.close()


def test_the_backend_is_kept_per_chat(tmp_path: Path) -> None:
    path = tmp_path / DB_FILE
    store = ChatStore(path)
    a = store.create_chat(backend="hybrid")
    b = store.create_chat()
    store.set_backend(b.id, "hybrid")
    store.set_backend(a.id, "llama.cpp")
    with pytest.raises(ValueError, match="backend"):
        store.set_backend(a.id, "vllm")
    with pytest.raises(KeyError):
        store.set_backend(999, "hybrid")
    store.close()
    # Another connection (a restart) reads what was written.
    again = ChatStore(path)
    try:
        assert (again.get_chat(a.id).backend, again.get_chat(b.id).backend) == ("llama.cpp", "hybrid")
        assert again.export_json(b.id)["backend"] == "hybrid"
        assert "Backend: experimental hybrid KV cache (torch)" in again.export_markdown(b.id)
        assert "Backend" not in again.export_markdown(a.id)
    finally:
        again.close()


def test_a_hybrid_chat_keeps_its_config(tmp_path: Path) -> None:
    """ "hybrid:NAME" keys name a hybrid config; storage checks their form, not the name."""
    from vrampilot.storage import hybrid_config, is_hybrid

    store = ChatStore(tmp_path / DB_FILE)
    try:
        chat = store.create_chat(backend="hybrid:retrieval-broad")
        assert store.get_chat(chat.id).backend == "hybrid:retrieval-broad"
        assert "config retrieval-broad" in store.export_markdown(chat.id)
        for bad in ("hybrid:", "hybrid:Bad Name", "hybrid:x;drop", "llama.cpp:x"):
            with pytest.raises(ValueError, match="backend"):
                store.set_backend(chat.id, bad)
    finally:
        store.close()
    assert is_hybrid("hybrid") and is_hybrid("hybrid:v4") and not is_hybrid("llama.cpp")
    assert (hybrid_config("hybrid"), hybrid_config("hybrid:v4")) == ("default", "v4")


def test_default_location_is_the_user_data_dir() -> None:
    from vrampilot.paths import data_dir

    store = ChatStore()
    try:
        assert Path(store.connection.execute("PRAGMA database_list").fetchone()[2]) == data_dir() / DB_FILE
    finally:
        store.close()


def test_a_killed_writer_loses_only_the_reply_in_progress(tmp_path: Path) -> None:
    """A child process saves a question, then is killed (SIGKILL) while 'generating' the reply."""
    db = tmp_path / DB_FILE
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from vrampilot.storage import ChatStore
        s = ChatStore(Path({str(db)!r}))
        c = s.create_chat()
        s.add_message(c.id, "user", "first question")
        s.add_message(c.id, "assistant", "first answer")
        s.add_message(c.id, "user", "second question")
        print("saved", flush=True)
        reply = []
        while True:  # the reply in progress lives only in memory
            reply.append("token ")
            time.sleep(0.01)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "saved"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    store = ChatStore(db)
    (summary,) = store.list_chats()
    assert [m.content for m in store.messages(summary.id)] == ["first question", "first answer", "second question"]
