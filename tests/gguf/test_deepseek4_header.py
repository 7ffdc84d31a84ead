"""DeepSeek-V4 headers: the cache's keys are read, and a header llama.cpp would refuse is refused first.

llama.cpp throws for some bad headers (a short or unknown ratio pattern, another MoE scoring) and
aborts the whole process for others (hyper-connection count, indexer head size, ...): either way
the spec says why in one line before anything loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_deepseek4
from tests.gguf.refusals import one_line_refusal
from vrampilot.gguf.spec import DSV4_REQUIRED_KEYS, load_model_spec


def test_reads_the_cache_keys(tmp_path: Path) -> None:
    path = write_deepseek4(tmp_path / "v4.gguf", n_layer=5, compress_ratios=(128, 4, 0, 4, 128, 0), sliding_window=96)
    spec = load_model_spec(path)
    assert spec.architecture == "deepseek4"
    assert spec.compress_ratios == (128, 4, 0, 4, 128)  # entries past block_count are ignored, as llama.cpp does
    assert spec.indexer_head_size == 64
    assert spec.sliding_window == 96 and spec.swa_layers == (True,) * 5
    assert (spec.head_dim_k, spec.n_head_kv, spec.n_layer_nextn) == (64, (1,) * 5, 0)
    assert not spec.is_mla


def _refusal(tmp_path: Path, **shape: Any) -> str:
    return one_line_refusal(write_deepseek4(tmp_path / "bad.gguf", **shape))


@pytest.mark.parametrize("key", DSV4_REQUIRED_KEYS)
def test_a_missing_key_is_named(tmp_path: Path, key: str) -> None:
    assert f"deepseek4.{key} is missing" in _refusal(tmp_path, omit=(key,))


@pytest.mark.parametrize(
    ("shape", "reason"),
    [
        ({"compress_ratios": (0, 4, 128)}, "compress_ratios has 3 entries for 4 layers"),
        ({"compress_ratios": (0, 4, 8, 4)}, "compression ratio 8 at layer 2"),
        ({"gating_func": 1}, "expects 4 (sqrtsoftplus)"),
    ],
)
def test_a_header_llama_cpp_refuses_is_refused_first(tmp_path: Path, shape: dict[str, Any], reason: str) -> None:
    assert reason in _refusal(tmp_path, **shape)
    pytest.importorskip("llama_cpp")
    from vrampilot.planner.dry_run.measure import MeasureError, measure_allocations
    from vrampilot.planner.settings import Settings

    with pytest.raises(MeasureError):  # llama.cpp throws on the same file
        measure_allocations(tmp_path / "bad.gguf", Settings(n_ctx=512))


@pytest.mark.parametrize(
    ("shape", "reason"),
    [
        ({"hc_mult": 2}, "hyper_connection.count is 2"),
        ({"indexer_head_dim": 32}, "indexer.key_length 32 is not a multiple of 64"),
        ({"o_groups": 3}, "output_group_count 3 does not divide"),
        ({"rope_dim": 128}, "rope.dimension_count 128 is larger than the head"),
        # one shared KV head: with more, the graph's set_rows of one head's row into the wider cache asserts
        ({"n_head_kv": 2}, "head_count_kv is 2: llama.cpp's DeepSeek-V4 graph supports only 1"),
        # an empty indexer cache (no ratio-4 layer) divides by zero in llama_kv_cache::build_input_k_rot
        ({"compress_ratios": (0, 128, 128, 0)}, "no layer has compression ratio 4"),
        ({"compress_ratios": (0, 0, 0, 0)}, "no layer has compression ratio 4"),
        # so does an empty HCA cache when its key rows are as long as the indexer's (then it rotates too)
        ({"compress_ratios": (4, 4, 0, 4)}, "no layer has compression ratio 128 and key_length equals"),
    ],
)
def test_a_header_llama_cpp_would_crash_on_is_refused(tmp_path: Path, shape: dict[str, Any], reason: str) -> None:
    """llama.cpp asserts (the process dies) on these: only the spec's refusal is checked."""
    assert reason in _refusal(tmp_path, **shape)


def test_no_hca_layer_is_fine_when_the_heads_differ(tmp_path: Path) -> None:
    path = write_deepseek4(tmp_path / "csa.gguf", compress_ratios=(4, 4, 0, 4), head_dim=128)
    assert load_model_spec(path).compress_ratios == (4, 4, 0, 4)
