"""The plan's explanation as the CLI and the window both show it (planner/search/explain.py)."""

from __future__ import annotations

from pathlib import Path

from testkit.gguf_models import write_qwen25_7b_q4_k_m
from testkit.machines import cpu_machine
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search import explain
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.units import GIB


def test_why_lines_keep_the_planners_order_then_warnings_then_what_would_fit(tmp_path: Path) -> None:
    spec = load_model_spec(write_qwen25_7b_q4_k_m(tmp_path / "Qwen2.5-7B-Instruct-Q4_K_M.gguf"))
    p = plan(spec, resolve_target(TargetRequest(vram_bytes=2 * GIB), cpu_machine()), Pins(n_gpu_layers=29, n_ctx=40000))
    assert not p.fits and p.suggestion and p.warnings
    lines = explain.why_lines(p)
    assert [w.text for w in lines] == [*p.reasons, *p.warnings, p.suggestion]
    assert [w.kind for w in lines] == [explain.REASON] * len(p.reasons) + [explain.WARNING] * len(p.warnings) + [
        explain.SUGGESTION
    ]
    assert explain.prompt_tokens(p) == 512 and explain.last_measured(p) is None  # no speed record on this target


def test_alternative_rows_price_each_against_the_plan(tmp_path: Path) -> None:
    spec = load_model_spec(write_qwen25_7b_q4_k_m(tmp_path / "Qwen2.5-7B-Instruct-Q4_K_M.gguf"))
    p = plan(spec, resolve_target(TargetRequest(vram_bytes=8 * GIB), cpu_machine()))
    rows = explain.alternative_rows(p)
    assert [r.label for r in rows] == [a.label for a in p.alternatives]
    for r, a in zip(rows, p.alternatives, strict=True):
        assert r.memory_delta_bytes == a.memory_total_bytes - p.memory.device.total_bytes
        assert r.verdict == (explain.FITS if a.fits else r.verdict) and (r.verdict == explain.FITS) == a.fits
    assert {r.verdict for r in rows} >= {explain.FITS, explain.TOO_BIG}
