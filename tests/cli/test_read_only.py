"""A read-only data folder, for real: VRAMPILOT_HOME bind-mounted read-only in a private mount
namespace (unshare; root ignores chmod, not a read-only mount). Each command and the window's start
say one line, without a traceback, and every file in the folder is left as it was.

Skipped where mount namespaces are not allowed.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from tests.mounts import in_mount_namespace
from vrampilot.storage import ChatStore

ROOT = Path(__file__).resolve().parents[2]
START_CHILD = ROOT / "tests" / "ui" / "start_child.py"

pytestmark = pytest.mark.slow


def read_only(home: Path, argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `argv` with `home` mounted read-only for it alone; `home` is the app's VRAMPILOT_HOME
    unless `env` says otherwise."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" || exit 77; exec "$@"'
    full = {"VRAMPILOT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen", **(env or {})}
    return in_mount_namespace(script, [str(home), *argv], full)


def _files(home: Path) -> dict[str, str]:
    return {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("ro-model") / "tiny-llama-F16.gguf", "llama")


def _used_home(tmp_path: Path) -> Path:
    """A data folder as a user leaves it: a saved chat, the hub's records, a settings file, a cache."""
    home = tmp_path / "home"
    store = ChatStore(home / "data" / "vrampilot.sqlite3")
    chat = store.create_chat("kept")
    store.add_message(chat.id, "user", "what was said")
    store.close()
    (home / "data" / "hub" / "pending").mkdir(parents=True)
    (home / "config").mkdir()
    (home / "config" / "settings.ini").write_text("[chat]\nenter_sends=true\n")
    (home / "cache").mkdir()  # each of the three folders is there once the app has run
    return home


CASES = [
    ["doctor"],
    ["plan", "{model}"],
    ["hub", "library"],
    ["chat", "{model}", "--prompt", "hi", "--save", "--max-tokens", "2"],
    ["chat", "{embedded}", "--prompt", "hi", "--max-tokens", "2"],  # a model that can answer
]


@pytest.mark.parametrize("used", [False, True], ids=["new-folder", "used-folder"])
@pytest.mark.parametrize("args", CASES, ids=["doctor", "plan", "hub-library", "chat-save", "chat"])
def test_a_command_on_a_read_only_data_folder_says_one_line(
    tmp_path: Path, model: Path, embedded_model: Path, args: list[str], used: bool
) -> None:
    home = _used_home(tmp_path) if used else tmp_path / "home"
    home.mkdir(exist_ok=True)
    before = _files(home)
    proc = read_only(
        home, [sys.executable, "-m", "vrampilot", *(a.format(model=model, embedded=embedded_model) for a in args)]
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "[Errno" not in proc.stderr, proc.stderr  # said in words, as every other line is
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("vrampilot: ")]
        assert proc.returncode == 2 and len(errors) == 1, proc.stderr
        # What a first run there says: the folder, why, and the setting that moves it.
        assert "Read-only file system" in errors[0] and "_HOME moves" in errors[0], errors[0]
    assert _files(home) == before


@pytest.mark.parametrize("used", [False, True], ids=["new-folder", "used-folder"])
def test_the_window_on_a_read_only_data_folder_says_why_it_cannot_start(tmp_path: Path, used: bool) -> None:
    home = _used_home(tmp_path) if used else tmp_path / "home"
    home.mkdir(exist_ok=True)
    before = _files(home)
    proc = read_only(home, [sys.executable, str(START_CHILD)])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    out = json.loads(line[len("RESULT ") :])
    assert out["exit_code"] == 1 and not out["window_opened"], out
    errors = [x for x in proc.stderr.splitlines() if x.startswith("vrampilot: ")]
    assert len(errors) == 1 and "cannot start" in errors[0] and "Read-only" in errors[0], proc.stderr
    assert out["dialogs"] == [errors[0].removeprefix("vrampilot: ")]  # said in a dialog too
    assert _files(home) == before


def test_the_window_with_a_read_only_settings_folder_opens_and_says_changes_are_not_kept(tmp_path: Path) -> None:
    home = _used_home(tmp_path)
    before = _files(home)
    proc = read_only(home / "config", [sys.executable, str(START_CHILD)], env={"VRAMPILOT_HOME": str(home)})
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    out = json.loads(line[len("RESULT ") :])
    assert out["window_opened"] and out["exit_code"] == 0, out
    assert len(out["dialogs"]) == 1 and "read-only" in out["dialogs"][0] and "config" in out["dialogs"][0], out
    assert {k: v for k, v in _files(home).items() if k.startswith("config")} == {
        k: v for k, v in before.items() if k.startswith("config")
    }
