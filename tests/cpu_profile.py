"""Where the suite's time goes, per test: wall seconds and CPU seconds (the worker's own and its
reaped child processes'), when `VRAMPILOT_TEST_PROFILE=DIR` is set (`make test-profile`).

On two cores the suite is bound by CPU, not by waiting, so `--durations` (wall time, which a busy
neighbour stretches) says less than the CPU a test costs. Each worker appends one JSON line per
test to DIR/<worker>.jsonl; `python -m tests.cpu_profile DIR` prints the 25 costliest tests and
files. A test's setup and teardown count (a module fixture's cost goes to its module's first
test); a child process's CPU counts when it is reaped, so a server kept for a module counts at
its module's end.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "VRAMPILOT_TEST_PROFILE"


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    wall0, (own0, children0) = time.monotonic(), _cpu()
    yield
    wall1, (own1, children1) = time.monotonic(), _cpu()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    row = {
        "test": item.nodeid,
        "file": item.nodeid.split("::", 1)[0],
        "wall_s": round(wall1 - wall0, 3),
        "own_cpu_s": round(own1 - own0, 3),
        "children_cpu_s": round(children1 - children0, 3),
    }
    Path(folder).mkdir(parents=True, exist_ok=True)
    with (Path(folder) / f"{worker}.jsonl").open("a") as out:
        out.write(json.dumps(row) + "\n")


def report(folder: Path, top: int = 25) -> list[str]:
    rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]
    for row in rows:
        row["cpu_s"] = row["own_cpu_s"] + row["children_cpu_s"]
    files: dict[str, dict[str, float]] = {}
    for row in rows:
        acc = files.setdefault(row["file"], {"cpu_s": 0.0, "wall_s": 0.0, "tests": 0})
        acc["cpu_s"] += row["cpu_s"]
        acc["wall_s"] += row["wall_s"]
        acc["tests"] += 1
    total_cpu, total_wall = sum(r["cpu_s"] for r in rows), sum(r["wall_s"] for r in rows)
    lines = [f"{len(rows)} tests: {total_cpu:,.0f} CPU-s, {total_wall:,.0f} test-s of wall time over the workers"]
    lines.append(f"the {top} costliest tests (CPU-s, wall-s):")
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"  {row['cpu_s']:7.1f} {row['wall_s']:7.1f}  {row['test']}")
    lines.append(f"the {top} costliest files (CPU-s, wall-s, tests):")
    for name, acc in sorted(files.items(), key=lambda kv: -kv[1]["cpu_s"])[:top]:
        lines.append(f"  {acc['cpu_s']:7.1f} {acc['wall_s']:7.1f} {int(acc['tests']):4d}  {name}")
    return lines


if __name__ == "__main__":
    print("\n".join(report(Path(sys.argv[1]))))
