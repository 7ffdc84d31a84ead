"""GGUF metadata written to attack the terminal: escape sequences and megabyte strings in a model's
name, keys and values reach `inspect`, `plan` and their errors as visible, inert, bounded text."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from testkit.gguf_models import write_model, write_raw_header
from tests.cli.test_cli import vrampilot

# OSC 52 sets the terminal's clipboard, ESC [2J clears the screen, CSI as the one C1 byte U+009B,
# BEL, and a right-to-left override that would reverse what follows.
ATTACK = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b31m\u202eevil"
TERMINAL_ACTS_ON = ("\x1b", "\x07", "\x9b", "\u202e")


def _inert(text: str) -> bool:
    return not any(c in text for c in TERMINAL_ACTS_ON)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    return write_model(
        folder / f"name{ATTACK}.gguf",
        "llama",
        n_layer=1,
        name=f"Model {ATTACK}",
        extra_kv=(("rope.scaling.type", f"linear{ATTACK}"),),
    )


@pytest.mark.parametrize("command", [("inspect",), ("plan", "--cpu-only", "--estimate")])
def test_escape_sequences_in_metadata_reach_the_terminal_inert(hostile: Path, command: tuple[str, ...]) -> None:
    r = vrampilot(*command, str(hostile))
    assert r.returncode == 0, r.stderr
    assert _inert(r.stdout) and _inert(r.stderr), r.stdout
    # Shown, written out: the user sees that the name holds an escape sequence.
    assert "Model \\u001b]52;c;cm0gLXJmIH4=\\u0007" in r.stdout


def test_an_error_quoting_a_hostile_key_is_inert_and_bounded(tmp_path: Path) -> None:
    key = ("k" * 2_000_000 + ATTACK).encode()
    bad = write_raw_header(
        tmp_path / "bad.gguf", n_kv=1, body=struct.pack("<Q", len(key)) + key + struct.pack("<I", 99)
    )
    r = vrampilot("inspect", str(bad))
    assert r.returncode == 2
    assert _inert(r.stderr) and "unknown value type" not in r.stdout
    assert len(r.stderr) < 2000, len(r.stderr)  # one line, not the 2 MB key


def test_a_megabyte_model_name_is_shown_short(tmp_path: Path) -> None:
    model = write_model(
        tmp_path / "big-name.gguf",
        "llama",
        n_layer=1,
        name="Big " + "x" * 4_000_000,
        extra_kv=(("rope.scaling.type", "y" * 1_000_000),),
    )
    for command in (("inspect",), ("plan", "--cpu-only", "--estimate")):
        r = vrampilot(*command, str(model))
        assert r.returncode == 0, r.stderr
        assert len(r.stdout) < 20_000 and "Big xxx" in r.stdout and "…" in r.stdout
    r = vrampilot("inspect", "--json", str(model))  # the data itself stays whole for scripts
    assert r.returncode == 0 and len(r.stdout) > 4_000_000


def test_json_printed_with_raw_characters_stays_json_with_the_same_text() -> None:
    """`chat --json` prints the reply with ensure_ascii=False: the escapes the terminal guard writes
    are JSON's own, so a script reads back exactly what the model wrote."""
    import json

    from vrampilot.cli import terminal_safe

    reply = {"reply": f"a\\{ATTACK}\x7f\u2066b\tc\nd"}
    shown = terminal_safe(json.dumps(reply, ensure_ascii=False))
    assert _inert(shown) and "\x7f" not in shown
    assert json.loads(shown) == reply
