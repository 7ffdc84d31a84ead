"""The model library: files and folders the user added, scanned for GGUF files."""

from __future__ import annotations

import os
from pathlib import Path

from vrampilot.storage import Library, scan_folder
from vrampilot.storage.db import DB_FILE


def _touch(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"GGUF")
    return p


def test_files_and_folders_persist_and_list_existing_models(tmp_path: Path) -> None:
    models = tmp_path / "models"
    a = _touch(models / "a.gguf")
    b = _touch(models / "sub" / "B.GGUF")
    _touch(models / "notes.txt")
    split1 = _touch(models / "big-00001-of-00002.gguf")
    _touch(models / "big-00002-of-00002.gguf")
    single = _touch(tmp_path / "elsewhere" / "single.gguf")
    gone = tmp_path / "deleted.gguf"

    lib = Library(tmp_path / DB_FILE)
    lib.add_file(single)
    lib.add_file(single)  # once only
    lib.add_file(gone)
    lib.add_folder(models)

    again = Library(tmp_path / DB_FILE)
    assert again.files() == [single, gone]
    assert again.folders() == [models]
    assert again.model_paths() == [single, a, b, split1]

    again.remove_file(single)
    again.remove_folder(models)
    assert again.model_paths() == []


def test_scan_depth_and_symlink_loop(tmp_path: Path) -> None:
    deep = _touch(tmp_path / "1" / "2" / "3" / "4" / "deep.gguf")
    shallow = _touch(tmp_path / "1" / "s.gguf")
    (tmp_path / "1" / "loop").symlink_to(tmp_path, target_is_directory=True)
    assert scan_folder(tmp_path, max_depth=2) == [shallow]
    assert deep in scan_folder(tmp_path, max_depth=5)
    assert scan_folder(tmp_path / "missing") == []


def test_a_path_that_is_not_utf8_is_kept_and_listed(tmp_path: Path) -> None:
    """A Linux name may hold any bytes; SQLite's text is UTF-8 only, so such a path is kept as its
    bytes (it raised UnicodeEncodeError, and the window did not open with such a model)."""
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9"))
    model = _touch(odd / "m\u00e9.gguf")
    lib = Library(tmp_path / DB_FILE)
    lib.add_file(model)
    lib.add_file(model)  # once only
    lib.add_folder(odd)
    again = Library(tmp_path / DB_FILE)
    assert again.files() == [model] and again.folders() == [odd]
    assert again.model_paths() == [model]
    again.remove_file(model)
    again.remove_folder(odd)
    assert again.model_paths() == []
