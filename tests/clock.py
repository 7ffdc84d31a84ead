"""Child processes that live at another time: libfaketime (Debian package `faketime`) preloaded, so
`time.time()` and `datetime.now()` in the child say 1971 or 2100 while the files it writes are real.

A test that needs it skips, saying so, where the library is not installed.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAST = "1971-01-01 00:00:00"
FUTURE = "2100-01-01 00:00:00"
_SEARCH = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def libfaketime() -> Path:
    for pattern in _SEARCH:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[0])
    pytest.skip("needs libfaketime (Debian: apt-get install faketime)")


def env_at(when: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process whose clock starts at `when` (UTC) and runs on from there
    (None: the real clock)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(ROOT)
    if when is None:
        return env
    env.update(
        LD_PRELOAD=str(libfaketime()),
        FAKETIME=f"@{when}",
        TZ="UTC",
        # The monotonic clock stays real: waits and timeouts in the child keep their length.
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    return env


def run_at(when: str | None, code: str, *, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run Python `code` in a child whose clock says `when`; its stdout. Fails on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env_at(when, env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
