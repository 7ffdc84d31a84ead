"""A chats database as an older build left it: the first `version` migrations, nothing after."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from vrampilot.storage.db import _MIGRATIONS, _statements


def old_database(path: Path, version: int) -> sqlite3.Connection:
    """An open connection to a new file at schema `version`, for the test to fill and close."""
    raw = sqlite3.connect(path)
    for script in _MIGRATIONS[:version]:
        for statement in _statements(script):
            raw.execute(statement)
    raw.execute(f"PRAGMA user_version = {version}")
    return raw
