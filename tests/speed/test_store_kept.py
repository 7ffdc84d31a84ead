"""machine-speed.json (probes and what replies taught) that this version cannot use: damaged, or
written by a newer version. Saving anew keeps the old file beside, byte for byte, never over it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.test_cli import vrampilot
from vrampilot.speed.measured import SpeedFactors
from vrampilot.speed.store import FILE_NAME, FORMAT_VERSION, load_machine_speed, update_machine_speed

NEWER = json.dumps({"version": FORMAT_VERSION + 1, "machines": {"fp": {"what": "a newer version learned"}}}).encode()
CASES = {"random-bytes": os.urandom(2048), "newer-version": NEWER, "not-a-record": b"[1, 2, 3]"}


@pytest.mark.parametrize("content", CASES.values(), ids=CASES.keys())
def test_an_unusable_speed_file_is_kept_beside_the_new_one(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / FILE_NAME
    path.write_bytes(content)
    assert load_machine_speed("fp", tmp_path).probe is None  # read as nothing measured, file untouched
    assert path.read_bytes() == content
    update_machine_speed("fp", lambda m: m.with_factors(SpeedFactors("cpu", (0.9,))), tmp_path)
    assert (tmp_path / "machine-speed.kept-1.json").read_bytes() == content
    assert load_machine_speed("fp", tmp_path).factors_for("cpu").decode_ratios == (0.9,)
    update_machine_speed("fp", lambda m: m.with_factors(SpeedFactors("cpu", (0.8,))), tmp_path)
    assert not (tmp_path / "machine-speed.kept-2.json").exists()  # a good file is written over as before


def test_the_cli_says_it_kept_the_record_in_a_line_of_its_own(tmp_path: Path) -> None:
    """The core's warning reaches the terminal as the CLI's other lines do, `vrampilot: ` first
    (Python's last-resort handler printed the bare message)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / FILE_NAME).write_bytes(b"not json")
    r = vrampilot(
        "chat", "--prompt", "hi", "--max-tokens", "2", "--threads", "1", env={"VRAMPILOT_HOME": str(tmp_path)}
    )
    assert r.returncode == 0, r.stderr
    kept = [line for line in r.stderr.splitlines() if "machine-speed.kept-1.json" in line]
    assert kept == [
        "vrampilot: kept machine-speed.json as machine-speed.kept-1.json (Expecting value: line 1 column 1 "
        "(char 0)); measuring anew"
    ], r.stderr
