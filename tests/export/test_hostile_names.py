"""Hostile file names in the exported llama-server lines: none can run a command or change argv.

bash is run for real (the exported line with a program that writes its argv to a file). PowerShell
and cmd cannot run on this machine (no pwsh in Debian, no Windows), so their lines are checked by
construction against models of their parsers: PowerShell's single-quoted strings, cmd's quote
flag and the C runtime's argv splitting (tests/export/test_args.py has the latter).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.export.test_args import _command_line_to_argv
from vrampilot.export import quote
from vrampilot.export.shell import UnquotableError

HOSTILE = [
    "/models/with space/m.gguf",
    "/models/zoë/模型.gguf",
    "/models/line\nbreak.gguf",
    "-x.gguf",
    '/models/it\'s "7B".gguf',
    "/models/$(touch CANARY).gguf",
    "/models/`touch CANARY`.gguf",
    "/models/%PATH%.gguf",
    "/models/100%.gguf",
    "/models/a^b.gguf",
    "/models/a & touch CANARY & b.gguf",
    'a" & touch CANARY & "b.gguf',
    "/models/a | touch CANARY; (x) <y> !z.gguf",
    "/models/O\u2019Brien\u2018s.gguf",
    "/models/\x1b]52;c;dG91Y2ggQ0FOQVJZ\x07\x1b[2J.gguf",
    "/models/tab\there.gguf",
    "/models/trailing\\",
    "",
]


def _argv(model: str) -> list[str]:
    return ["llama-server", "-m", model, "-c", "4096"]


DUMP_ARGV = """#!/bin/sh
for a in "$@"; do printf '%s\\0' "$a"; done > "$ARGV_OUT"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", HOSTILE)
def test_bash_line_runs_with_argv_intact_and_nothing_else(tmp_path: Path, name: str) -> None:
    dump = tmp_path / "dump argv.sh"
    dump.write_text(DUMP_ARGV)
    dump.chmod(0o755)
    argv = [str(dump), "-m", name, "-c", "4096"]
    line = quote(argv, "bash", env={"GGML_BACKEND_PATH": f"/lib/{name}"})
    # One printable line: no raw control character reaches the terminal that shows it.
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", line), line
    out = tmp_path / "argv"
    subprocess.run(["bash", "-c", line], cwd=tmp_path, env={**os.environ, "ARGV_OUT": str(out)}, check=True, timeout=60)
    assert out.read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv[1:]]
    assert not (tmp_path / "CANARY").exists()


def _powershell_tokens(line: str) -> tuple[list[str], str]:
    """PowerShell's reading of `line`: its single-quoted string literals (a doubled quote inside is
    one quote; any of ' ‘ ’ ‚ ‛ opens, closes or doubles), and the code outside them."""
    quotes = "'\u2018\u2019\u201a\u201b"
    strings: list[str] = []
    code: list[str] = []
    i = 0
    while i < len(line):
        if line[i] in quotes:
            i += 1
            cur: list[str] = []
            while True:
                assert i < len(line), f"unterminated string in {line!r}"
                if line[i] in quotes:
                    if i + 1 < len(line) and line[i + 1] in quotes:
                        cur.append(line[i])
                        i += 2
                        continue
                    i += 1
                    break
                cur.append(line[i])
                i += 1
            strings.append("".join(cur))
            code.append("S")
        else:
            code.append(line[i])
            i += 1
    return strings, "".join(code)


@pytest.mark.parametrize("name", HOSTILE)
def test_powershell_line_is_literal_strings_or_refused(name: str) -> None:
    env = {"GGML_BACKEND_PATH": f"C:\\Users\\{name}"}
    try:
        line = quote(_argv(name), "powershell", env=env)
    except UnquotableError as exc:
        assert re.search(r"[\x00-\x1f\x7f-\x9f]", name), f"refused a name PowerShell can hold: {exc}"
        return
    strings, code = _powershell_tokens(line)
    # Outside the literal strings only the assignment, the separators and plain words remain.
    assert re.fullmatch(r"(\$env:GGML_BACKEND_PATH = S; )?(& )?[\w .\-/:\\=+S]*", code), (line, code)
    assert env["GGML_BACKEND_PATH"] in strings and (name in strings or name in code)


def _cmd_unquoted(line: str) -> str:
    """What cmd reads outside double quotes (where & | < > ^ ( ) and line breaks act), with each
    quoted stretch replaced by Q. %NAME% expands everywhere, so it is returned separately."""
    out: list[str] = []
    quoted = False
    for ch in line:
        if ch == '"':
            quoted = not quoted
            if quoted:
                out.append("Q")
        elif not quoted:
            out.append(ch)
    return "".join(out)


@pytest.mark.parametrize("name", HOSTILE)
def test_cmd_line_cannot_run_a_command_or_is_refused(name: str) -> None:
    argv = _argv(name)
    try:
        line = quote(argv, "cmd", env={"GGML_BACKEND_PATH": f"C:\\vp\\{name}"})
    except UnquotableError:
        assert re.search(r'["%\x00-\x1f\x7f-\x9f]', name), f"refused a name cmd can hold: {name!r}"
        return
    body = line.removeprefix("chcp 65001 >NUL & ")
    head, _, command = body.rpartition(" && ")
    assert head in ("", 'set "GGML_BACKEND_PATH=C:\\vp\\' + name + '"')
    # No variable can expand, no line break, and no special character outside quotes.
    assert "%" not in body and "\n" not in body and "\r" not in body
    assert not set(_cmd_unquoted(command)) & set("&|<>^()!"), command
    assert _command_line_to_argv(command) == argv


def test_cmd_refusal_names_the_character_and_the_way_out() -> None:
    with pytest.raises(UnquotableError, match=r"contains a % character.*rename the file.*bash"):
        quote(_argv("C:\\models\\100%.gguf"), "cmd")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_exported_bash_line_from_the_cli_runs_the_hostile_model_path(tmp_path: Path) -> None:
    """`vrampilot export --server X` on a real GGUF file whose name is hostile: the line, run by
    bash, hands X exactly that path, and nothing else runs."""
    from testkit.gguf_models import write_model

    folder = tmp_path / "a & touch CANARY; $(touch CANARY) `touch CANARY`"
    folder.mkdir()
    model = write_model(folder / "-m 'x' \"y\" %PATH% ^ zoë\x1b[31m.gguf", "llama", n_layer=1)
    dump = tmp_path / "dump.sh"
    dump.write_text(DUMP_ARGV)
    dump.chmod(0o755)
    r = subprocess.run(
        [sys.executable, "-m", "vrampilot", "export", "--cpu-only", "--estimate", "--server", str(dump), str(model)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    out = tmp_path / "argv"
    subprocess.run(["bash", "-c", line], cwd=tmp_path, env={**os.environ, "ARGV_OUT": str(out)}, check=True, timeout=60)
    args = out.read_bytes().split(b"\0")[:-1]
    assert args[:2] == [b"-m", os.fsencode(model)]
    assert not (tmp_path / "CANARY").exists() and not (folder / "CANARY").exists()
