"""The suite hands whole files to its workers costliest first (tests/file_order.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cpu_profile import write_costs
from tests.file_order import COSTS, load_costs, ordered

ROOT = Path(__file__).resolve().parents[1]


def test_files_go_costliest_first_keeping_each_files_own_order() -> None:
    ids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "c.py::t3"]
    costs = {"a.py": (5.0, 2), "b.py": (100.0, 1), "c.py": (30.0, 3)}
    assert ordered(ids, costs) == ["b.py::t1", "c.py::t1", "c.py::t2", "c.py::t3", "a.py::t1", "a.py::t2"]


def test_a_file_not_in_the_table_costs_the_median_test_times_its_tests() -> None:
    # Per test: a 1 s, b 10 s, c 4 s: the median is 4 s, so new.py's three tests cost 12 s,
    # between c.py (8 s) and b.py (20 s).
    costs = {"a.py": (1.0, 1), "b.py": (20.0, 2), "c.py": (8.0, 2)}
    ids = ["a.py::t", "new.py::x", "new.py::y", "new.py::z", "b.py::t", "c.py::t"]
    assert [i.split("::")[0] for i in ordered(ids, costs)] == ["b.py", "new.py", "new.py", "new.py", "c.py", "a.py"]


def test_a_missing_or_damaged_table_leaves_the_order_alone(tmp_path: Path) -> None:
    assert load_costs(tmp_path / "none.json") == {}
    bad = tmp_path / "bad.json"
    bad.write_text('{"a.py": 3}')
    assert load_costs(bad) == {}
    bad.write_text("[1,")
    assert load_costs(bad) == {}


def test_a_profile_merges_into_the_table(tmp_path: Path) -> None:
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({"old.py": {"cpu_s": 7.0, "tests": 1}, "a.py": {"cpu_s": 1.0, "tests": 1}}))
    profile = tmp_path / "profile"
    profile.mkdir()
    rows = [
        {"file": "a.py", "own_cpu_s": 1.5, "children_cpu_s": 2.0},
        {"file": "a.py", "own_cpu_s": 0.5, "children_cpu_s": 0.0},
    ]
    (profile / "gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert write_costs(profile, table) == 1
    assert load_costs(table) == {"a.py": (4.0, 2), "old.py": (7.0, 1)}


def test_the_collection_is_in_the_tables_order() -> None:
    """What the workers collect (and xdist then hands out in this order) follows the table."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/export",
            "tests/gguf",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    files = list(dict.fromkeys(line.split("::")[0] for line in out.splitlines() if "::" in line))
    costs = load_costs(COSTS)
    assert costs, "tests/file_costs.json is missing: `make test-profile` writes it"
    measured = [f for f in files if f in costs]
    assert [costs[f][0] for f in measured] == sorted((costs[f][0] for f in measured), reverse=True)
