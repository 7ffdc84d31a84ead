"""The order in which whole test files go to pytest-xdist's workers: the costliest first.

`make test` gives each of two workers whole files (`--dist loadfile`), handed out in the order
of xdist's queue as a worker runs short of work. Left to itself xdist sorts that queue by each
file's number of tests, so a file of a few long tests (the window's first start measuring the
machine: three tests, about two minutes) went out last and one worker ran it alone while the
other had finished. Handing out the costliest files first (longest processing time first) leaves
the many short files to fill both workers at the end.

The costs are each file's CPU seconds in the last `make test-profile` (tests/file_costs.json,
which `python -m tests.cpu_profile DIR --write-costs tests/file_costs.json` updates): CPU rather
than wall time, because a busy machine stretches wall time and not the work. A file missing from
the table is costed at the table's median per test times its number of tests. The table only
orders the run: a stale one costs time, never a result.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

COSTS = Path(__file__).with_name("file_costs.json")


def file_of(nodeid: str) -> str:
    """The file a test id belongs to, as tests/cpu_profile.py names it."""
    return nodeid.split("::", 1)[0]


def load_costs(path: Path = COSTS) -> dict[str, tuple[float, int]]:
    """File -> (CPU seconds, tests) in the last profile; empty where the table is missing or
    unreadable (the run is then in xdist's own order, which is slower, not wrong)."""
    try:
        data = json.loads(path.read_text())
        return {str(f): (float(row["cpu_s"]), int(row["tests"])) for f, row in data.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def ordered(nodeids: list[str], costs: dict[str, tuple[float, int]]) -> list[str]:
    """The test ids, whole files together, the costliest file first; each file's own order is kept.
    A file missing from `costs` is costed at the median CPU seconds per test times its tests."""
    per_file = Counter(file_of(n) for n in nodeids)
    per_test = [cpu_s / tests for cpu_s, tests in costs.values() if tests > 0]
    median = statistics.median(per_test) if per_test else 1.0
    cost = {f: costs[f][0] if f in costs else median * n for f, n in per_file.items()}
    position = {f: i for i, f in enumerate(per_file)}  # the collection's order breaks ties
    return sorted(nodeids, key=lambda n: (-cost[file_of(n)], position[file_of(n)]))


def pytest_configure(config: pytest.Config) -> None:
    # xdist's loadfile sorts its queue by number of tests unless told to keep the collection's order.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after every other hook has selected and marked the tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    costs = load_costs()
    if not costs:
        return
    rank = {n: i for i, n in enumerate(ordered([item.nodeid for item in items], costs))}
    items.sort(key=lambda item: rank[item.nodeid])
