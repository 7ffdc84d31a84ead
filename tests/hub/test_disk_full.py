"""A full disk, for real: a small tmpfs mounted in a private mount namespace (unshare) as HF_HOME.

Skipped where mount namespaces are not allowed. The fake Hub runs in this process; the download
runs in the child, which shares the network namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hub.conftest import Models
from tests.hub.fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("disk_full_child.py")


def _unshare_prefix() -> list[str] | None:
    exe = shutil.which("unshare")
    if exe is None or sys.platform != "linux":
        return None
    return [exe, "-m"] if os.geteuid() == 0 else [exe, "-r", "-m"]


def _run_on_tmpfs(tmp_path: Path, size: str, args: list[str], env_extra: dict[str, str]) -> dict[str, Any]:
    prefix = _unshare_prefix()
    if prefix is None:
        pytest.skip("needs Linux with unshare(1)")
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    script = f'mount -t tmpfs -o size={size} tmpfs "{mnt}" || exit 77; exec "{sys.executable}" "{CHILD}" "$@"'
    env = {**os.environ, **env_extra, "HF_HOME": str(mnt), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [*prefix, "sh", "-c", script, "child", *args], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    if proc.returncode == 77 or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_not_enough_space_is_refused_before_any_byte(
    hub: FakeHub, tiny_repo: str, models: Models, tmp_path: Path
) -> None:
    out = _run_on_tmpfs(
        tmp_path,
        "4m",
        ["precheck", tiny_repo, "tiny-llama-F16.gguf"],
        {"HF_ENDPOINT": hub.endpoint, "VRAMPILOT_HOME": str(tmp_path / "vp")},
    )
    assert out["first"] == "NotEnoughSpaceError"
    assert "not enough disk space" in str(out["message"]) and "free" in str(out["message"])
    assert hub.served("tiny-llama-F16.gguf") == 0


def test_disk_filling_up_mid_download_keeps_the_bytes_and_resumes(
    hub: FakeHub, tiny_repo: str, models: Models, tmp_path: Path
) -> None:
    name = "tiny-llama-F16.gguf"
    size = models.tiny_llama.stat().st_size
    hub.throttle_bps = 8_000_000  # the filler must win the race against a 2 MiB transfer
    out = _run_on_tmpfs(
        tmp_path,
        "24m",
        ["fills-up", tiny_repo, name],
        {"HF_ENDPOINT": hub.endpoint, "VRAMPILOT_HOME": str(tmp_path / "vp")},
    )
    assert out["first"] == "NotEnoughSpaceError", out
    assert "the disk filled up" in str(out["message"]) and "resume" in str(out["message"])
    have = out["part_bytes"]
    assert isinstance(have, int) and 0 < have < size
    assert out["second"] == "done"
    last = hub.file_requests(name)[-1]
    assert last.range == f"bytes={have}-" and last.bytes_sent == size - have
