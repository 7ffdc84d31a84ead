"""Values past what llama.cpp or a sampler can take get one clear line and exit status 2, before
anything loads (they used to crash the process, abort in OpenMP, or print a usage block)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import vrampilot


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and "usage:" not in r.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["chat", "--prompt", "hi", "--threads", "100000"], "at most 512"),
        (["chat", "--prompt", "hi", "--threads", "50000"], "at most 512"),
        (["chat", "--prompt", "hi", "--threads", "0"], "at least 1"),
        (["chat", "--prompt", "hi", "--temperature", "nan"], "temperature must be a finite number"),
        (["chat", "--prompt", "hi", "--temperature", "inf"], "temperature must be a finite number"),
        (["chat", "--prompt", "hi", "--ctx", "1"], "at least 256"),
        (["chat", "--prompt", "   "], "--prompt is empty"),
        (["chat", "--prompt", "hi", "--max-tokens", "0"], "max tokens must be at least 1"),
        (["chat", "--prompt", "hi", "--logit-bias", "{"], "--logit-bias takes TEXT=BIAS, for example '{=100': not '{'"),
        (["chat", "--prompt", "hi", "--logit-bias", "{=lots"], "--logit-bias takes TEXT=BIAS"),
        (["chat", "--prompt", "hi", "--logit-bias", "{=nan"], "the logit bias of '{' must be a finite number"),
        (["plan", "--vram", "-1GiB"], "size"),
        (["plan", "--no-such-option"], "unrecognized arguments"),
        (["plan", "--ctx", "lots"], "not a whole number"),
        (["chat"], "--prompt"),
    ],
)
def test_out_of_range_values_get_one_clear_line(args: list[str], says: str) -> None:
    line = one_line_error(vrampilot(*args))
    assert says in line, line


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="argv bytes that are not UTF-8 (POSIX)")
def test_a_prompt_that_is_not_utf8_is_refused_in_one_line() -> None:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    r = subprocess.run(
        [sys.executable, "-m", "vrampilot", "chat", "--prompt", b"caf\xe9"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "--prompt is not valid UTF-8 text" in one_line_error(r)


def test_the_help_says_the_cli_keeps_no_history_unless_asked() -> None:
    r = vrampilot("chat", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "--save" in text and "without it the CLI keeps no history" in text and "--chat ID" in text


@pytest.mark.slow
def test_save_keeps_the_turn_in_the_apps_chats_and_chat_continues_it(tmp_path: Path) -> None:
    from vrampilot.storage import ChatStore

    env = {"VRAMPILOT_HOME": str(tmp_path / "home")}
    common = ["--max-tokens", "6", "--seed", "1", "--temperature", "0", "--ctx", "512", "--threads", "1", "--json"]
    r1 = vrampilot("chat", "--prompt", "Name a colour.", "--save", *common, env=env)
    assert r1.returncode == 0, r1.stderr
    chat_id = json.loads(r1.stdout)["chat_id"]
    assert isinstance(chat_id, int)
    r2 = vrampilot("chat", "--prompt", "And another one?", "--chat", str(chat_id), *common, env=env)
    assert r2.returncode == 0, r2.stderr
    out2 = json.loads(r2.stdout)
    assert (
        out2["chat_id"] == chat_id and out2["stats"]["prompt_tokens"] > json.loads(r1.stdout)["stats"]["prompt_tokens"]
    )
    store = ChatStore(Path(env["VRAMPILOT_HOME"]) / "data" / "vrampilot.sqlite3")  # the app's chats file
    roles = [m.role for m in store.messages(chat_id)]
    store.close()
    assert roles == ["user", "assistant", "user", "assistant"]
    # Without --save nothing is kept.
    r3 = vrampilot("chat", "--prompt", "Hi", *common, env=env)
    assert r3.returncode == 0 and json.loads(r3.stdout)["chat_id"] is None
    assert one_line_error(vrampilot("chat", "--prompt", "Hi", "--chat", "99999", *common, env=env)).endswith(
        "there is no saved chat 99999"
    )
