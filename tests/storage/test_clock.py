"""The clock set far back (1971) or far ahead (2100) by a real child process (libfaketime): the chats
list keeps the order of use, the chat just written on top, whatever the clock said meanwhile."""

from __future__ import annotations

from pathlib import Path

from tests.clock import FUTURE, PAST, run_at
from vrampilot.storage import ChatStore
from vrampilot.storage.db import DB_FILE


def _create_at(when: str, path: Path, title: str) -> None:
    out = run_at(
        when,
        f"""
        import time
        from pathlib import Path
        from vrampilot.storage import ChatStore
        store = ChatStore(Path({str(path)!r}))
        chat = store.create_chat({title!r})
        store.add_message(chat.id, "user", "hello")
        store.close()
        print(time.gmtime().tm_year)
    """,
    )
    assert out.split() == [when[:4]]  # the child did live at that time


def test_the_chat_used_last_is_on_top_whatever_the_clock_said(tmp_path: Path) -> None:
    path = tmp_path / DB_FILE
    store = ChatStore(path)
    try:
        today = store.create_chat("today")
        store.add_message(today.id, "user", "hi")
        _create_at(PAST, path, "clock in 1971")
        assert [c.title for c in store.list_chats()] == ["clock in 1971", "today"]
        _create_at(FUTURE, path, "clock in 2100")
        assert [c.title for c in store.list_chats()] == ["clock in 2100", "clock in 1971", "today"]
        # The clock right again: the chat continued now comes first, as do new ones.
        store.add_message(today.id, "user", "back")
        assert [c.title for c in store.list_chats()] == ["today", "clock in 2100", "clock in 1971"]
        store.create_chat("new")
        assert [c.title for c in store.list_chats()][:2] == ["new", "today"]
        assert [c.title for c in store.search("")][:2] == ["new", "today"]
    finally:
        store.close()
