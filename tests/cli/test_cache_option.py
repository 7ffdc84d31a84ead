"""`vrampilot plan --cache` on DeepSeek-V4-Pro at its real dimensions (a sparse file): the cache by
part at 8K-1M tokens and the labelled "what if" caches, as text and in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.real_shapes import write_real
from tests.cli.test_cli import vrampilot


@pytest.fixture(scope="module")
def v4_pro(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_real("v4-pro", tmp_path_factory.mktemp("cache_cli"))


def test_plan_cache_prints_the_parts_and_what_if(v4_pro: Path) -> None:
    r = vrampilot("plan", str(v4_pro), "--ctx", "1048576", "--vram", "24GiB", "--cache", "--estimate")
    assert r.returncode in (0, 1), r.stderr  # 1: does not fit, still a plan
    out = r.stdout
    assert "Cache by part" in out and "What if" in out and "Assumptions:" in out
    table = out[out.index("Cache by part") :]
    header = table.splitlines()[1].split()
    assert header == ["tokens", "window", "csa", "hca", "indexer", "state", "total"]
    rows = [line.split()[0] for line in table.splitlines()[2:6]]
    assert rows == ["8K", "32K", "128K", "1M"]
    assert "kv_lora_rank 512 + rope 64" in table


def test_plan_json_carries_the_cache_table(v4_pro: Path) -> None:
    r = vrampilot("plan", str(v4_pro), "--ctx", "1048576", "--cpu-only", "--cache", "--estimate", "--json")
    d = json.loads(r.stdout)
    rows = d["cache"]["rows"]
    assert [row["n_ctx"] for row in rows] == [8192, 32768, 131072, 1048576]
    last = rows[-1]
    assert set(last["parts"]) == {"window", "csa", "hca", "indexer", "state"}
    assert sum(last["parts"].values()) == last["total_bytes"]
    assert last["total_bytes"] < 0.05 * last["what_if"]["GQA"]


def test_help_lists_the_option() -> None:
    r = vrampilot("plan", "--help")
    assert "--cache" in r.stdout
