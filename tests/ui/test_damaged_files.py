"""A garbage settings file and a damaged or newer database at the window's start: a clear message, and
the user's old file kept byte for byte (moved aside for settings, left in place for a database)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vrampilot.storage import ChatStore
from vrampilot.ui.prefs import Prefs

ROOT = Path(__file__).resolve().parents[2]
START_CHILD = Path(__file__).with_name("start_child.py")

GARBAGE = {
    "random-bytes": os.urandom(4096),
    "binary-zeros": b"[chat]\nenter_sends=true\n\0\0\0\0",
    "not-utf8": b"[chat]\nsystem_prompt=caf\xe9\n",
    "not-ini": b'[model\nlast=/a/b.gguf\n[chat]\nsampling={"temperature": 0.5\n',
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "config").mkdir(parents=True)
    return tmp_path / "home"


@pytest.mark.parametrize("content", GARBAGE.values(), ids=GARBAGE.keys())
def test_a_garbage_settings_file_is_kept_aside_and_defaults_are_used(home: Path, content: bytes) -> None:
    path = home / "config" / "settings.ini"
    path.write_bytes(content)
    prefs = Prefs()
    kept = home / "config" / "settings.unreadable-1.ini"
    assert prefs.problem is not None and str(path) in prefs.problem and str(kept) in prefs.problem
    assert kept.read_bytes() == content
    assert not prefs.enter_sends() and prefs.last_model() is None
    prefs.set_enter_sends(True)
    prefs.sync()
    assert kept.read_bytes() == content  # never rewritten by the settings written after
    assert Prefs().enter_sends() and Prefs().problem is None  # the new file is a good one


def test_a_second_garbage_file_does_not_replace_the_first_kept(home: Path) -> None:
    path = home / "config" / "settings.ini"
    for content in (b"\0first", b"\0second"):
        path.write_bytes(content)
        assert Prefs().problem is not None
    assert (home / "config" / "settings.unreadable-1.ini").read_bytes() == b"\0first"
    assert (home / "config" / "settings.unreadable-2.ini").read_bytes() == b"\0second"


def test_a_good_settings_file_is_left_alone(home: Path) -> None:
    path = home / "config" / "settings.ini"
    prefs = Prefs()
    prefs.set_enter_sends(True)
    prefs.set_last_model("/models/a b/ü.gguf")
    prefs.sync()
    again = Prefs()
    assert again.problem is None and again.enter_sends() and again.last_model() == Path("/models/a b/ü.gguf")
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.ini"]


def test_values_of_the_wrong_type_read_as_defaults(home: Path) -> None:
    """A hand-edited file: valid INI, values that are not what each setting holds."""
    (home / "config" / "settings.ini").write_text(
        "[chat]\nlast=abc\nenter_sends=maybe\nsampling=[1, 2]\nsystem_prompt=\n"
        "[window]\ngeometry=not bytes\nsplitter=1\n[pins]\n" + "0123456789abcdef" + '={"n_ctx": "big", "bogus": 1}\n'
    )
    prefs = Prefs()
    assert prefs.problem is None
    assert prefs.last_chat() is None
    assert prefs.enter_sends() in (True, False)
    prefs.sampling()
    assert prefs.geometry() is None and prefs.splitter() is None


# -- the window's start, as a user starts it (a child process, offscreen) ----------------------


def _start(home: Path) -> tuple[dict[str, Any], str]:
    env = {**os.environ, "VRAMPILOT_HOME": str(home), "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run(
        [sys.executable, str(START_CHILD)], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("RESULT ") :]), proc.stderr


@pytest.mark.slow
def test_the_window_starts_over_a_garbage_settings_file_and_says_so(home: Path) -> None:
    path = home / "config" / "settings.ini"
    path.write_bytes(GARBAGE["random-bytes"])
    out, stderr = _start(home)
    assert out["window_opened"] and out["exit_code"] == 0, (out, stderr[-3000:])
    assert any("could not be read" in str(d) for d in out["dialogs"]), out
    assert "Traceback" not in stderr
    assert next(x for x in stderr.splitlines() if "settings file" in x).startswith("vrampilot: The settings file")
    assert (home / "config" / "settings.unreadable-1.ini").read_bytes() == GARBAGE["random-bytes"]


def _damage_chats(db: Path) -> None:
    db.write_bytes(os.urandom(64 * 1024))


def _damage_documents(db: Path) -> None:
    ChatStore(db.with_name("vrampilot.sqlite3")).close()
    db.write_bytes(b"SQLite format 3\0" + os.urandom(8192))


def _damage_chats_inside(db: Path) -> None:
    from tests.storage.test_damaged import damaged_in_the_middle

    damaged_in_the_middle(db)


def _newer_chats(db: Path) -> None:
    ChatStore(db).close()
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA user_version = 99")
    raw.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "damage", "said"),
    [
        ("vrampilot.sqlite3", _damage_chats, "damaged"),
        ("documents.sqlite3", _damage_documents, "damaged"),
        ("vrampilot.sqlite3", _damage_chats_inside, "damaged"),
        ("vrampilot.sqlite3", _newer_chats, "newer"),
    ],
    ids=["chats-garbage", "documents-garbage", "chats-damaged-inside", "chats-newer"],
)
def test_the_window_refuses_a_damaged_or_newer_database_and_keeps_it(
    home: Path, name: str, damage: Callable[[Path], object], said: str
) -> None:
    db = home / "data" / name
    db.parent.mkdir(parents=True)
    damage(db)
    before = _sha(db)
    out, stderr = _start(home)
    assert out["exit_code"] == 1 and not out["window_opened"], (out, stderr[-3000:])
    assert len(out["dialogs"]) == 1 and said in str(out["dialogs"][0]) and str(db) in str(out["dialogs"][0])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert [x for x in stderr.splitlines() if x.startswith("vrampilot: ")] == [f"vrampilot: {out['dialogs'][0]}"]
    assert _sha(db) == before
