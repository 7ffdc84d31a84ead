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
