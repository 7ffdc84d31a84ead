"""Out of memory is a message and a smaller plan, never a traceback or an aborted process.

The CLI runs under an address-space limit (as `ulimit -v` / `prlimit --as` set it), from too small
to load anything to enough for a backed-off context. Before, numpy's MemoryError reached the user
as a traceback (18 of 48 runs) and a failed ggml allocation aborted the process (exit 134).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux applies it"),
]

MIB = 1 << 20


def _limited(limit_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


@pytest.mark.parametrize("limit_mib", [560, 720, 880, 1040, 1200])
def test_under_an_address_space_limit_the_cli_backs_off_or_says_why(limit_mib: int, tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vrampilot",
            "chat",
            "--prompt",
            "Hi",
            "--max-tokens",
            "4",
            "--ctx",
            "65536",
            "--threads",
            "1",
            "--temperature",
            "0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limited(limit_mib * MIB),
    )
    for crash in ("Traceback", "GGML_ASSERT", "Aborted", "MemoryError"):
        assert crash not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode in (0, 2), (proc.returncode, proc.stderr[-2000:])
    lines = [x for x in proc.stderr.strip().splitlines() if not x.startswith("vrampilot: llama.cpp could not allocate")]
    if proc.returncode == 2:
        assert len(lines) == 1 and "address space" in lines[0] and "after backing off" in lines[0], proc.stderr
    else:
        assert proc.stdout.strip(), "a reply"
        assert "backed off: context" in proc.stderr  # 64K did not fit: a smaller context did
