"""What the app keeps between runs: chats (SQLite) and the model library. Qt-free; the UI keeps its
own preferences in QSettings."""

from vrampilot.storage.chats import (
    BACKEND_HYBRID,
    BACKEND_LLAMA,
    BACKENDS,
    Chat,
    ChatStore,
    ChatSummary,
    StoredMessage,
    hybrid_config,
    is_hybrid,
    title_from,
)
from vrampilot.storage.db import StorageError, connect, default_db_path
from vrampilot.storage.library import Library, scan_folder

__all__ = [
    "BACKENDS",
    "BACKEND_HYBRID",
    "BACKEND_LLAMA",
    "Chat",
    "ChatStore",
    "ChatSummary",
    "Library",
    "StorageError",
    "StoredMessage",
    "connect",
    "default_db_path",
    "hybrid_config",
    "is_hybrid",
    "scan_folder",
    "title_from",
]
