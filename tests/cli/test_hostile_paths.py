"""Model paths a user can name by mistake or by the file system's leave: a pipe, a device, bytes
that are not UTF-8, a line break in the name. Each gets one line or a correct answer, never a hang
or a traceback (docs/faults.md, "Names, metadata and secrets")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import waits
from tests.cli.test_cli_bounds import one_line_error

posix_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX file names and pipes")
# What a command that blocks does: nothing. This is how long the wait lets it do nothing before it
# fails (a blocked open of a FIFO uses no CPU at all).
BLOCKED_S = 30.0


def _run(*args: str, shell: bool = False) -> subprocess.CompletedProcess[str]:
    argv = ["bash", "-c", args[0]] if shell else [sys.executable, "-m", "vrampilot", *args]
    return waits.run(argv, cpu_s=120, idle_s=BLOCKED_S)


@posix_only
@pytest.mark.parametrize("command", ["plan", "inspect", "export"])
def test_a_named_pipe_is_refused_in_one_line_without_waiting_for_a_writer(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    line = one_line_error(_run(command, str(fifo)))
    assert (
        line
        == f"vrampilot: {fifo}: is a pipe (FIFO or a shell's <(...)), not a GGUF file; name a model file saved on disk"
    )


@posix_only
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for <(...)")
def test_a_process_substitution_is_refused_in_one_line(embedded_model: Path) -> None:
    r = _run(f"exec {sys.executable} -m vrampilot inspect <(cat '{embedded_model}')", shell=True)
    assert "is a pipe (FIFO or a shell's <(...)), not a GGUF file" in one_line_error(r)


@posix_only
def test_dev_zero_is_named_for_what_it_is() -> None:
    line = one_line_error(_run("inspect", "/dev/zero"))
    assert line == "vrampilot: /dev/zero: is a character device, not a GGUF file; name a model file saved on disk"


def _not_utf8_copy(model: Path, folder: Path) -> Path:
    """`model` under a name whose bytes are not UTF-8 (Latin-1 "café"), as Python names it."""
    path = Path(os.fsdecode(os.fsencode(folder) + b"/caf\xe9 model.gguf"))
    os.link(model, path)
    return path


@posix_only
def test_a_path_that_is_not_utf8_is_planned_and_exported_byte_for_byte(embedded_model: Path, tmp_path: Path) -> None:
    """The planner's dry run and the exported line take the file system's bytes (os.fsencode);
    the terminal is shown the odd byte as an escape, never a traceback."""
    model = _not_utf8_copy(embedded_model, tmp_path)
    r = _run("plan", str(model))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "could not" not in r.stderr
    assert "caf\\udce9 model.gguf" in r.stdout  # the name, as --json would write it
    assert "sized by llama.cpp's own allocator" in r.stdout  # the dry run opened the file

    dump = tmp_path / "dump-argv"
    dump.write_text('#!/bin/sh\nfor a in "$@"; do printf \'%s\\0\' "$a"; done > "$ARGV_OUT"\n')
    dump.chmod(0o755)
    r = _run("export", str(model), "--server", str(dump))
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert "$'" in line and "\\xe9" in line, line
    out = tmp_path / "argv"
    subprocess.run(["bash", "-c", line], env={**os.environ, "ARGV_OUT": str(out)}, check=True, timeout=60)
    argv = out.read_bytes().split(b"\0")
    assert argv[argv.index(b"-m") + 1] == os.fsencode(model)
    for shell in ("powershell", "cmd"):
        line = one_line_error(_run("export", str(model), "--shell", shell))
        assert "bytes that are not UTF-8 text" in line, line


@posix_only
def test_chat_refuses_a_path_llama_cpp_python_cannot_open_in_one_line(embedded_model: Path, tmp_path: Path) -> None:
    """llama-cpp-python encodes the path as UTF-8 itself: where the engine loads, one line says so."""
    model = _not_utf8_copy(embedded_model, tmp_path)
    line = one_line_error(_run("chat", str(model), "--prompt", "hi", "--max-tokens", "1"))
    assert line == (
        f"vrampilot: {tmp_path}/caf\\udce9 model.gguf: llama-cpp-python opens only files whose path is UTF-8 "
        "text, and this one's is not; rename the file or its folder (or link it under a UTF-8 name)"
    )


@posix_only
def test_a_line_break_in_the_file_name_stays_on_the_model_line(embedded_model: Path, tmp_path: Path) -> None:
    model = tmp_path / "two\nlines.gguf"
    os.link(embedded_model, model)
    r = _run("plan", str(model), "--estimate")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("Model   ") and first.endswith("(two\\nlines.gguf)"), first
