"""The user's folders in the Windows places (settings roaming in %APPDATA%, data and caches local
in %LOCALAPPDATA%), a user name with non-ASCII characters, and paths past Windows' MAX_PATH.

platformdirs' Windows rules are pure Python, so they run here with the platform forced; the
profile folders come from its documented override variables (WIN_PD_OVERRIDE_<CSIDL>), which stand
where Windows' SHGetKnownFolderPath answers. What is written goes to real temporary folders."""

from __future__ import annotations

import sqlite3
from pathlib import Path, PureWindowsPath

import pytest

from vrampilot.hub.hf_cache import RepoCache
from vrampilot.paths import WINDOWS_PATH_LIMIT, data_dir, long_path, user_dir_text
from vrampilot.storage.db import connect

PROFILE = "C:\\Users\\Zoë Ångström-Øberg"


def test_settings_roam_and_data_stay_local_for_a_non_ascii_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIN_PD_OVERRIDE_APPDATA", f"{PROFILE}\\AppData\\Roaming")
    monkeypatch.setenv("WIN_PD_OVERRIDE_LOCAL_APPDATA", f"{PROFILE}\\AppData\\Local")
    # (platformdirs joins with this system's separator: compared as Windows paths)
    assert PureWindowsPath(user_dir_text("config", "win32")) == PureWindowsPath(PROFILE, "AppData/Roaming/VRAMPilot")
    assert PureWindowsPath(user_dir_text("data", "win32")) == PureWindowsPath(PROFILE, "AppData/Local/VRAMPilot")
    assert PureWindowsPath(user_dir_text("cache", "win32")) == PureWindowsPath(PROFILE, "AppData/Local/VRAMPilot/Cache")


def test_linux_keeps_the_xdg_places(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "d"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "k"))
    assert [user_dir_text(k, "linux") for k in ("config", "data", "cache")] == [
        str(tmp_path / "c" / "VRAMPilot"),
        str(tmp_path / "d" / "VRAMPilot"),
        str(tmp_path / "k" / "VRAMPilot"),
    ]


def test_paths_past_max_path_get_the_long_path_prefix() -> None:
    repo = "C:\\Users\\Zoë\\.cache\\huggingface\\hub\\models--" + "o" * 96 + "--" + "n" * 96
    long_file = repo + "\\snapshots\\" + "c" * 40 + "\\Q4_K_M\\model-00001-of-00002.gguf"
    assert len(long_file) > WINDOWS_PATH_LIMIT
    assert long_path(long_file, "win32") == "\\\\?\\" + long_file
    assert long_path("\\\\nas\\models\\" + "x" * 250, "win32") == "\\\\?\\UNC\\nas\\models\\" + "x" * 250
    assert long_path("\\\\?\\" + long_file, "win32") == "\\\\?\\" + long_file  # once
    assert long_path("C:\\Users\\Zoë\\model.gguf", "win32") == "C:\\Users\\Zoë\\model.gguf"
    assert long_path("C:\\a\\..\\b\\" + "x" * 250, "win32") == "\\\\?\\C:\\b\\" + "x" * 250  # \\?\ skips normalising
    assert long_path(long_file, "linux") == long_file


def test_a_non_ascii_deep_home_holds_chats_and_downloads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A user folder with non-ASCII letters, deep enough that its files pass 260 characters.
    home = tmp_path.joinpath("Zoë Ångström-Øberg", *["ünïcödé-" * 6] * 5)
    monkeypatch.setenv("VRAMPILOT_HOME", str(home))
    db = data_dir() / "chats.db"
    assert len(str(db)) > 260
    conn = connect(db)
    conn.close()
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    cache = RepoCache(home / "hub", "Zoë/" + "m" * 96)
    pointer = cache.pointer("c" * 40, "Q4_K_M/model.gguf")
    pointer.parent.mkdir(parents=True)
    pointer.write_bytes(b"GGUF")
    assert pointer == home / "hub" / f"models--Zoë--{'m' * 96}" / "snapshots" / ("c" * 40) / "Q4_K_M" / "model.gguf"
