"""bench/planner.py's MoE table (`--moe`): one released shape on one GPU size, planned by us and
fitted by llama.cpp's own --fit through the bundled llama-server (real processes, no GPU)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from testkit.benches import load_bench

GIB = 2**30


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("planner")


@pytest.fixture(scope="module")
def row(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("llama_cpp")
    rows = bench.moe_rows(tmp_path_factory.mktemp("moe"), keys=["gpt-oss-20b"], vram_gib=(8,), ctxs=(8192,))
    assert len(rows) == 1
    return rows[0]


def test_our_plan_and_the_markdown_row(bench: ModuleType, row: Any) -> None:
    assert (row.model, row.vram_gib, row.n_ctx) == ("gpt-oss-20b", 8, 8192)
    ours = row.ours
    assert ours.settings.n_ctx == 8192 and ours.fits and ours.decode_tps > 0
    assert 0 < ours.device_bytes <= 8 * GIB
    assert ours.moe_layers == 24 and 0 <= ours.experts_in_ram <= 24
    assert row.plan_ms > 0 and row.baseline_ms > 0
    lines = bench.moe_report([row]).splitlines()
    assert lines[0].startswith("| model |") and set(lines[1]) <= {"|", "-"}
    assert lines[2].startswith("| gpt-oss-20b | 8 GiB | 8K |")
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    if row.fit is None:
        assert row.fit_why and f"n/a: {row.fit_why}" in lines[2]


def test_llama_cpps_fit_is_read_and_costed(row: Any) -> None:
    if row.fit is None:
        pytest.skip(f"llama.cpp's fit is not available here: {row.fit_why}")
    fit, costed = row.fit, row.fit_costed
    # gpt-oss-20b at Q8_0/MXFP4 is 11.3 GiB: on 8 GiB llama.cpp keeps every layer on the GPU
    # (24 and the output) and moves the experts of some layers to the CPU, as its fit.cpp does.
    assert fit.n_gpu_layers == 25 and costed.settings.n_gpu_layers == 25
    assert fit.cpu_patterns and all(p.startswith(r"blk\.") for p in fit.cpu_patterns)
    assert 0 < costed.experts_in_ram < costed.moe_layers
    # llama.cpp's own projection stays within the budget less its margin, and our memory model
    # counts the same bytes for the same placement (weights per tensor, KV exact, compute close).
    assert fit.device_mib is not None and fit.device_mib * 2**20 <= 7 * GIB
    assert abs(costed.device_bytes - fit.device_mib * 2**20) <= 0.03 * fit.device_mib * 2**20
    assert costed.decode_tps > 0


def test_a_failed_or_cut_fit_is_a_reason_not_a_number(bench: ModuleType) -> None:
    failed = (
        "0.00.1 W common_fit_params: failed to fit params to free device memory: "
        "n_gpu_layers already set by user to 10, abort\n"
        "VRAMPILOT_FIT status=1 n_gpu_layers=10 n_ctx=8192\nVRAMPILOT_FIT end\n"
    )
    why = bench.parse_fit_log(failed, 1.0)
    assert why == "llama.cpp's fit failed: n_gpu_layers already set by user to 10, abort"
    cut = "VRAMPILOT_FIT status=0 n_gpu_layers=20 n_ctx=8192\nVRAMPILOT_FIT override blk\\.3\\.ffn=CPU\n"
    assert bench.parse_fit_log(cut, 1.0) == "llama-server's fit report was cut short"
    assert bench.parse_fit_log("E llama_model_load: error loading model\n", 1.0).startswith("llama-server gave no fit")


def test_the_page_is_regenerated_between_its_markers(bench: ModuleType, tmp_path: Path) -> None:
    page = tmp_path / "moe.md"
    page.write_text(f"# Title\n\n{bench.MOE_TABLE_START}\nold table\n{bench.MOE_TABLE_END}\n\n## After\n")
    bench.write_moe_table(page, "| model |\n|---|\n| x |")
    text = page.read_text()
    assert "old table" not in text and text.startswith("# Title\n") and text.endswith("## After\n")
    between = text[text.index(bench.MOE_TABLE_START) : text.index(bench.MOE_TABLE_END)]
    assert "Measured on commit " in between and "| x |" in between
    assert "--moe --write" in between
    bench.write_moe_table(page, "| y |")  # a second run replaces the first
    assert "| x |" not in page.read_text() and page.read_text().count(bench.MOE_TABLE_START) == 1
    page.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- moe-table:start -->"):
        bench.write_moe_table(page, "| y |")
