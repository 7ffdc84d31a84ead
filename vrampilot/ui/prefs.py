"""The app's preferences in QSettings (an INI file in the user config dir): last model, the pins
per model, sampling, the system prompt, Enter-to-send, window layout and theme.

QSettings reads a damaged file as best it can and, at its next write, replaces it with what it
made of it: a user's file would be lost without a word. So a file that is not what QSettings
writes (binary bytes, not UTF-8, not INI) is first moved aside, kept under another name, and the
app starts with default settings and says so (`Prefs.problem`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from vrampilot.engine import SamplingParams
from vrampilot.paths import config_dir, set_aside
from vrampilot.planner.plan import Pins
from vrampilot.ui.theme import THEME_CHOICES, ThemeChoice


def _model_key(path: str | Path) -> str:
    # The path's bytes on disk: the same as its UTF-8 for every name that is UTF-8, and defined for
    # one that is not (os.fsdecode's surrogates, which no UTF-8 encoder takes).
    return hashlib.sha1(os.fsencode(Path(path))).hexdigest()[:16]


SETTINGS_FILE = "settings.ini"


def _unreadable(path: Path) -> str | None:
    """Why `path` is not a settings file QSettings wrote (None: it is, or there is none)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    if b"\0" in data:
        return "it holds binary data"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "it is not UTF-8 text"
    probe = QSettings(str(path), QSettings.Format.IniFormat)
    probe.allKeys()
    if probe.status() is not QSettings.Status.NoError:
        return "it is not in the INI format"
    return None


def _set_aside(path: Path) -> tuple[Path | None, str]:
    """Move a damaged settings file to `settings.unreadable-N.ini`; (None, why) where it cannot be."""
    try:
        return set_aside(path, "unreadable"), ""
    except OSError as exc:
        return None, exc.strerror or str(exc)


# Pins that belong to no model: the enabled tools' tokens follow the agent settings, not the file.
NOT_PER_MODEL = frozenset({"tools_tokens"})


class Prefs:
    def __init__(self, settings: QSettings | None = None) -> None:
        # What the user is told at start when the settings file could not be used (None: all well).
        self.problem: str | None = None
        if settings is None:
            path = config_dir() / SETTINGS_FILE
            why = _unreadable(path)
            if why is not None:
                kept, error = _set_aside(path)
                where = f"it was kept as {kept}" if kept else f"it was left as it is ({error}) and will not be changed"
                self.problem = (
                    f"The settings file {path} could not be read ({why}): VRAM Pilot uses its default "
                    f"settings; {where}."
                )
                if kept is None:
                    # Pointed elsewhere for this session, QSettings cannot rewrite the user's file.
                    path = Path(tempfile.mkdtemp(prefix="vrampilot-settings-")) / SETTINGS_FILE
            elif not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
                # QSettings fails to write without a word: the user would lose every change made now.
                self.problem = (
                    f"The settings folder {path.parent} is read-only: VRAM Pilot uses the settings in it "
                    "but cannot keep the ones changed now."
                )
            settings = QSettings(str(path), QSettings.Format.IniFormat)
        self._s = settings

    def sync(self) -> None:
        self._s.sync()

    # -- model and pins ------------------------------------------------------------------------
    def last_model(self) -> Path | None:
        value = str(self._s.value("model/last", "", type=str) or "")
        return Path(value) if value else None

    def set_last_model(self, path: str | Path) -> None:
        self._s.setValue("model/last", str(path))

    def rpc_hosts(self) -> str:
        """The Plan panel's RPC hosts, as typed ("host:port=6GiB, ...")."""
        return str(self._s.value("plan/rpc_hosts", "", type=str) or "")

    def set_rpc_hosts(self, text: str) -> None:
        self._s.setValue("plan/rpc_hosts", text)

    def gpu_backend(self) -> str:
        """The llama.cpp backend for cards several can drive: "auto", "cuda" or "vulkan"
        (`--gpu-backend` on the command line)."""
        return str(self._s.value("plan/gpu_backend", "auto", type=str) or "auto")

    def set_gpu_backend(self, value: str) -> None:
        self._s.setValue("plan/gpu_backend", value)

    def pins_for(self, model: str | Path) -> Pins:
        """The pins remembered for `model` (never NOT_PER_MODEL's: they follow other settings)."""
        raw = str(self._s.value(f"pins/{_model_key(model)}", "", type=str) or "")
        if not raw:
            return Pins()
        try:
            data = json.loads(raw)
        except ValueError:
            return Pins()
        known = {f.name for f in fields(Pins)} - NOT_PER_MODEL
        # JSON has no tuples: a list (the tensor split) comes back as one, so Pins stay hashable.
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known}
        return Pins(**values)

    def set_pins_for(self, model: str | Path, pins: Pins) -> None:
        key = f"pins/{_model_key(model)}"
        pinned = {k: v for k, v in pins.pinned().items() if k not in NOT_PER_MODEL}
        if pinned:
            self._s.setValue(key, json.dumps(pinned, sort_keys=True))
        else:
            self._s.remove(key)

    # -- chat ----------------------------------------------------------------------------------
    def sampling(self) -> SamplingParams:
        raw = str(self._s.value("chat/sampling", "", type=str) or "")
        if raw:
            try:
                return SamplingParams.from_dict(json.loads(raw))
            except (ValueError, TypeError):
                pass
        return SamplingParams()

    def set_sampling(self, params: SamplingParams) -> None:
        self._s.setValue("chat/sampling", json.dumps(params.to_dict()))

    def default_system_prompt(self) -> str:
        return str(self._s.value("chat/system_prompt", "", type=str))

    def set_default_system_prompt(self, text: str) -> None:
        self._s.setValue("chat/system_prompt", text)

    def enter_sends(self) -> bool:
        return bool(self._s.value("chat/enter_sends", False, type=bool))

    def set_enter_sends(self, value: bool) -> None:
        self._s.setValue("chat/enter_sends", value)

    def last_chat(self) -> int | None:
        value = self._s.value("chat/last", 0, type=int)
        return int(value) if isinstance(value, int) and value else None

    def set_last_chat(self, chat_id: int | None) -> None:
        self._s.setValue("chat/last", chat_id or 0)

    # -- window --------------------------------------------------------------------------------
    def geometry(self) -> QByteArray | None:
        value: Any = self._s.value("window/geometry")
        return value if isinstance(value, QByteArray) else None

    def set_geometry(self, geometry: QByteArray, splitter: QByteArray) -> None:
        self._s.setValue("window/geometry", geometry)
        self._s.setValue("window/splitter", splitter)

    def theme(self) -> ThemeChoice:
        """View > Theme: "system" (follow it), "light" or "dark"."""
        value = str(self._s.value("window/theme", "system", type=str) or "system")
        return value if value in THEME_CHOICES else "system"

    def set_theme(self, choice: ThemeChoice) -> None:
        self._s.setValue("window/theme", choice)

    def splitter(self) -> QByteArray | None:
        value: Any = self._s.value("window/splitter")
        return value if isinstance(value, QByteArray) else None
