"""`vrampilot plan --cache` on DeepSeek-V4-Pro at its real dimensions (a sparse file): the cache by
part at 8K-1M tokens and the labelled "what if" caches, as text and in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.gguf_models import write_renamed
from testkit.real_shapes import write_real
from tests.cli.test_cli import vrampilot
from vrampilot.planner.families import COUNTED_BY_LLAMA_CPP


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


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file of an architecture the cache formula is not verified on (nanbeige: llama's tensors)."""
    return write_renamed(tmp_path_factory.mktemp("cache_routed") / "nanbeige.gguf", "llama", "nanbeige")


def test_a_routed_architecture_shows_llama_cpps_count(routed: Path) -> None:
    """Its plan's cache is llama.cpp's count, so is the table: each row is llama.cpp's dry run at
    that context (K and V as its log splits them), labelled so, not the formula's split. (The
    fixture has llama's layout, so the numbers alone cannot tell count from formula: each row is
    compared with a dry run of its own.)"""
    pytest.importorskip("llama_cpp")
    from vrampilot.planner.dry_run.measure import measure_allocations
    from vrampilot.planner.settings import Settings

    r = vrampilot("plan", str(routed), "--cpu-only", "--ctx", "4096", "--cache", "--json")
    assert r.returncode in (0, 1), r.stderr
    d = json.loads(r.stdout)
    assert d["kv_source"] == "llama.cpp"
    assert (d["cache"]["source"], d["cache"]["source_text"].split(":")[0]) == ("llama.cpp", COUNTED_BY_LLAMA_CPP)
    s = d["settings"]
    for row in d["cache"]["rows"]:
        m = measure_allocations(
            routed,
            Settings(
                n_ctx=row["n_ctx"],
                type_k=s["type_k"],
                type_v=s["type_v"],
                flash_attn=s["flash_attn"],
                n_ubatch=s["n_ubatch"],
                n_batch=s["n_batch"],
            ),
            dry_run=True,
        )
        assert row["parts"] == {"K": sum(x.k_bytes for x in m.kv_lines), "V": sum(x.v_bytes for x in m.kv_lines)}
        assert row["total_bytes"] == sum(row["parts"].values())
    text = vrampilot("plan", str(routed), "--cpu-only", "--ctx", "4096", "--cache").stdout
    assert f"Cache by part (this model, K {s['type_k']} / V {s['type_v']}, {COUNTED_BY_LLAMA_CPP}: its dry run" in text


def test_a_verified_architecture_shows_the_formula_as_planned(v4_pro: Path) -> None:
    r = vrampilot("plan", str(v4_pro), "--ctx", "65536", "--cpu-only", "--cache", "--estimate", "--json")
    assert json.loads(r.stdout)["cache"]["source"] == "formula"
