"""Faults of the file system for real: a command run as root of a private mount namespace (unshare;
`-r` where the test is not root), where a script mounts a small tmpfs (a full disk) or binds a
folder read-only, as nothing but a real mount makes them (root ignores chmod).

The test is skipped where mount namespaces are not allowed, or where the script's own mount is
refused (it exits 77 then).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MOUNT_REFUSED = 77


def in_mount_namespace(script: str, args: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`sh -c SCRIPT ARGS...` in a mount namespace of its own, from the checkout, with the checkout on
    PYTHONPATH and `env` over this process's environment; its output captured as text."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux with unshare(1)")
    prefix = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]
    proc = subprocess.run(
        [*prefix, "sh", "-c", script, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    if proc.returncode == MOUNT_REFUSED or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot mount here: {proc.stderr.strip()}")
    return proc
