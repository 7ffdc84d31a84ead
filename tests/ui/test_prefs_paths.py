"""The window's per-model pins are kept under a key made from the model's path: any path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vrampilot.planner.plan import Pins
from vrampilot.ui.prefs import Prefs


def test_pins_are_kept_for_a_model_whose_path_is_not_utf8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key hashed the path's UTF-8, which a Linux name of other bytes has none of: the window
    stopped planning such a model with UnicodeEncodeError. It hashes the bytes on disk now, the
    same bytes as before for every UTF-8 name (pins saved by earlier versions are found)."""
    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "config").mkdir(parents=True)
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.gguf"))
    plain = tmp_path / "caf\u00e9.gguf"
    prefs = Prefs()
    prefs.set_pins_for(odd, Pins(n_ctx=2048))
    prefs.set_pins_for(plain, Pins(n_ctx=4096))
    again = Prefs()
    assert again.pins_for(odd) == Pins(n_ctx=2048) and again.pins_for(plain) == Pins(n_ctx=4096)
