"""What the app keeps between runs: chats (SQLite) and the model library. Qt-free; the UI keeps its
own preferences in QSettings.

Its API is `__all__`, each name imported on first use (vrampilot/lazy_api.py); its modules are
private to it (docs/development.md, "Stated APIs").
"""

from __future__ import annotations

from vrampilot.lazy_api import lazy_api

TYPE_CHECKING = False  # typing's, without importing typing (vrampilot/lazy_api.py)
if TYPE_CHECKING:
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
    from vrampilot.storage.conversation import ConversationService, safe_filename
    from vrampilot.storage.db import StorageError, connect, default_db_path, migrate, open_database
    from vrampilot.storage.images import (
        DAMAGED,
        IMAGE_FILE_SUFFIXES,
        MAX_IMAGE_BYTES,
        ImageFileError,
        image_problem,
        image_suffix,
        read_image,
    )
    from vrampilot.storage.library import Library, scan_folder

__all__ = [
    "BACKENDS",
    "BACKEND_HYBRID",
    "BACKEND_LLAMA",
    "DAMAGED",
    "IMAGE_FILE_SUFFIXES",
    "MAX_IMAGE_BYTES",
    "Chat",
    "ChatStore",
    "ChatSummary",
    "ConversationService",
    "ImageFileError",
    "Library",
    "StorageError",
    "StoredMessage",
    "connect",
    "default_db_path",
    "hybrid_config",
    "image_problem",
    "image_suffix",
    "is_hybrid",
    "migrate",
    "open_database",
    "read_image",
    "safe_filename",
    "scan_folder",
    "title_from",
]

# Each module and the names of the API it holds ("api=name" where the API renames one).
_HOLDERS = {
    "chats": (
        "BACKEND_HYBRID",
        "BACKEND_LLAMA",
        "BACKENDS",
        "Chat",
        "ChatStore",
        "ChatSummary",
        "StoredMessage",
        "hybrid_config",
        "is_hybrid",
        "title_from",
    ),
    "conversation": ("ConversationService", "safe_filename"),
    "db": ("StorageError", "connect", "default_db_path", "migrate", "open_database"),
    "images": (
        "DAMAGED",
        "IMAGE_FILE_SUFFIXES",
        "MAX_IMAGE_BYTES",
        "ImageFileError",
        "image_problem",
        "image_suffix",
        "read_image",
    ),
    "library": ("Library", "scan_folder"),
}

if not TYPE_CHECKING:  # hidden from the type checker, which reads the imports above
    __getattr__, __dir__ = lazy_api(__name__, _HOLDERS)
