"""A damaged database (random bytes, cut short) or one from a newer version: a clear StorageError
and the file left byte for byte as it was, for both of the app's SQLite files."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from vrampilot.documents import DocumentStore
from vrampilot.storage import ChatStore, StorageError
from vrampilot.storage.db import DB_FILE

ROOT = Path(__file__).resolve().parents[2]


def _chats_with_history(path: Path) -> None:
    store = ChatStore(path)
    for k in range(20):
        chat = store.create_chat(f"chat {k}")
        for _ in range(10):
            store.add_message(chat.id, "user", "words " * 300)
    store.close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file, as after a clean exit
    raw.close()


def garbage(path: Path) -> None:
    path.write_bytes(os.urandom(64 * 1024))


def cut_short(path: Path) -> None:
    _chats_with_history(path)
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def cut_to_the_header(path: Path) -> None:
    _chats_with_history(path)
    with open(path, "r+b") as fh:
        fh.truncate(4096)


def damaged_in_the_middle(path: Path) -> None:
    """Header and schema intact: the file opens, and only a query that reaches these pages fails."""
    _chats_with_history(path)
    with open(path, "r+b") as fh:
        fh.seek(3 * 4096)
        fh.write(os.urandom(4 * 4096))


def newer(path: Path) -> None:
    _chats_with_history(path)
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    "damage", [garbage, cut_short, cut_to_the_header, damaged_in_the_middle, newer], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("opener", [ChatStore, DocumentStore], ids=["chats", "documents"])
def test_a_damaged_or_newer_database_is_refused_and_kept(
    tmp_path: Path, damage: Callable[[Path], None], opener: Callable[[Path], object]
) -> None:
    path = tmp_path / DB_FILE
    damage(path)
    before = _digests(tmp_path)
    with pytest.raises(StorageError) as info:
        opener(path)
    message = str(info.value)
    assert str(path) in message
    assert "left as it is" in message and ("newer" if damage is newer else "damaged") in message
    assert _digests(tmp_path) == before  # nothing replaced, nothing added beside it, nothing deleted


@pytest.mark.slow
@pytest.mark.parametrize("damage", [garbage, damaged_in_the_middle, newer], ids=lambda f: f.__name__)
def test_the_cli_says_one_line_and_keeps_the_file(tmp_path: Path, damage: Callable[[Path], None]) -> None:
    """`chat --save` opens the chats before loading the model: refused there, with nothing generated."""
    model = write_model(tmp_path / "tiny-llama-F16.gguf", "llama")
    home = tmp_path / "home"
    path = home / "data" / DB_FILE
    path.parent.mkdir(parents=True)
    damage(path)
    before = _digests(path.parent)
    env = {**os.environ, "VRAMPILOT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    for extra in ([], ["--chat", "1"]):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "vrampilot",
                "chat",
                str(model),
                "--prompt",
                "hi",
                "--save",
                "--max-tokens",
                "2",
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        errors = [x for x in proc.stderr.splitlines() if x.startswith("vrampilot: ")]
        assert len(errors) == 1 and str(path) in errors[0] and "left as it is" in errors[0], proc.stderr
        assert proc.stdout == ""  # no reply was generated to be lost
    assert _digests(path.parent) == before
