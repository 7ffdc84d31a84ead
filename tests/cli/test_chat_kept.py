"""What `chat --save` and `chat --chat ID` keep when things go wrong, for real: the command killed
(SIGKILL) mid-reply keeps the question, as the window does; a disk that cannot take the question
says so before a reply is made. A real `vrampilot chat` on the embedded model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import vrampilot
from tests.mounts import in_mount_namespace
from vrampilot.storage import ChatStore

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
LONG = ["--max-tokens", "1000", "--ctx", "2048", "--threads", "1", "--seed", "1", "--temperature", "0"]


def _the_chat(home: Path) -> tuple[int, list[tuple[str, str]]]:
    """The one saved chat: its id and its messages as (role, text)."""
    store = ChatStore(home / "data" / "vrampilot.sqlite3")
    try:
        chats = store.list_chats()
        assert len(chats) == 1, chats
        return chats[0].id, [(m.role, m.content) for m in store.messages(chats[0].id)]
    finally:
        store.close()


def _killed_mid_reply(home: Path, *args: str) -> None:
    """`vrampilot chat ARGS` killed with SIGKILL once its reply has begun on stdout."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "chat", *args, *LONG],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "VRAMPILOT_HOME": str(home)},
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.read(1)  # the reply's first byte: the model is writing
        assert first and proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_chat_killed_mid_reply_keeps_its_question(tmp_path: Path) -> None:
    home = tmp_path / "home"
    story = "Tell me a very long story about a mill by a river."
    _killed_mid_reply(home, "--prompt", story, "--save")
    chat_id, turns = _the_chat(home)
    assert turns == [("user", story)]  # the reply being written is all that is lost

    # Continued: the question left without a reply joins the new one, as in the window.
    more = "Make it about the miller's daughter."
    short = ["--max-tokens", "4", "--ctx", "2048", "--threads", "1", "--json"]
    r = vrampilot("chat", "--prompt", more, "--chat", str(chat_id), *short, env={"VRAMPILOT_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    reply = json.loads(r.stdout)["reply"]
    assert _the_chat(home) == (chat_id, [("user", f"{story}\n\n{more}"), ("assistant", reply)])

    again = "And then?"
    _killed_mid_reply(home, "--prompt", again, "--chat", str(chat_id))
    assert _the_chat(home) == (chat_id, [("user", f"{story}\n\n{more}"), ("assistant", reply), ("user", again)])


# Inside the mount namespace: a data folder as a user leaves it (one saved chat), then the disk
# filled but for what opening the chats file takes (SQLite's 32 KiB index of its write-ahead log):
# the chats open, and the question cannot be written.
FILL = """
import os, shutil, sys
from pathlib import Path
from vrampilot.storage import ChatStore
home = Path(sys.argv[1])
store = ChatStore(home / "data" / "vrampilot.sqlite3")
store.add_message(store.create_chat("kept").id, "user", "what was said")
store.close()
(home / "config").mkdir()
with open(home / "filler.bin", "wb") as f:
    f.write(b"\\0" * (shutil.disk_usage(home).free - int(sys.argv[2])))
"""


# And after the command, still inside: the chats as the window would list them.
LIST = """
import json, sys
from pathlib import Path
from vrampilot.storage import ChatStore
store = ChatStore(Path(sys.argv[1]) / "data" / "vrampilot.sqlite3")
print("CHATS " + json.dumps([[c.title, c.n_messages] for c in store.list_chats()]))
"""


@pytest.mark.parametrize("left", [40 << 10, 64 << 10], ids=["no-room-for-a-chat", "no-room-for-the-question"])
def test_a_question_the_full_disk_refuses_is_said_before_any_reply(left: int, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    script = (
        'mount -t tmpfs -o size=1m tmpfs "$0" || exit 77; py="$1"; "$py" -c "$2" "$0" "$3" || exit 3; shift 3; '
        '"$@"; code=$?; "$py" -c "$LIST" "$0"; exit $code'
    )
    chat = [sys.executable, "-m", "vrampilot", "chat", "--save", "--prompt", "Hi!", *LONG]
    # The CLI picks its CPU code as a user's does (the suite forces one on a CPU with AMX): the
    # CPU probe's cache file is part of what the folder holds when the disk fills.
    env = {"VRAMPILOT_HOME": str(home), "LIST": LIST, "VRAMPILOT_CPU_VARIANT": ""}
    proc = in_mount_namespace(script, [str(home), sys.executable, FILL, str(left), *chat], env)
    reply, _, chats = proc.stdout.rpartition("CHATS ")
    assert not reply, f"a reply was made that could not be kept: {reply!r}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("vrampilot: ")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "the disk is full" in errors[0] and errors[0].endswith("no reply was made"), errors[0]
    assert json.loads(chats) == [["kept", 1]]  # as it was: no empty chat left behind
