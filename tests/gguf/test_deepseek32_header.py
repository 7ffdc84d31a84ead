"""DeepSeek-V3.2 (`deepseek32`, DSA) headers: the indexer's key is read, and a header llama.cpp
would refuse or abort on is refused first, in one line, before anything loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_deepseek32
from tests.gguf.refusals import one_line_refusal
from vrampilot.gguf.spec import DSA_REQUIRED_KEYS, load_model_spec


def test_reads_the_indexer_key(tmp_path: Path) -> None:
    spec = load_model_spec(write_deepseek32(tmp_path / "v32.gguf", indexer_head_dim=128, kv_lora_rank=256))
    assert (spec.architecture, spec.indexer_head_size, spec.compress_ratios) == ("deepseek32", 128, ())
    assert spec.is_mla and spec.head_dim_k == 256 + 32 and spec.n_head_kv == (1, 1, 1)


def _refusal(tmp_path: Path, **shape: Any) -> str:
    return one_line_refusal(write_deepseek32(tmp_path / "bad.gguf", **shape))


@pytest.mark.parametrize("key", DSA_REQUIRED_KEYS)
def test_a_missing_key_is_named(tmp_path: Path, key: str) -> None:
    assert f"deepseek32.{key} is missing" in _refusal(tmp_path, omit=(key,))


@pytest.mark.parametrize("indexer_head_dim", [32, 96, 192])
def test_an_indexer_llama_cpp_cannot_rotate_is_refused(tmp_path: Path, indexer_head_dim: int) -> None:
    """llama.cpp aborts the process on these: it rotates the indexer keys with one Hadamard matrix the
    size of the largest power of two (>= 64) dividing key_length, and multiplies it with the whole key."""
    reason = _refusal(tmp_path, indexer_head_dim=indexer_head_dim)
    assert f"indexer.key_length {indexer_head_dim} is not a power of two of at least 64" in reason


def test_llama_cpp_refuses_a_missing_indexer_key_too(tmp_path: Path) -> None:
    """A missing key is one llama.cpp throws on (it does not crash): the spec says so first."""
    _refusal(tmp_path, omit=("attention.indexer.key_length",))
    pytest.importorskip("llama_cpp")
    from vrampilot.planner.dry_run.measure import MeasureError, measure_allocations
    from vrampilot.planner.settings import Settings

    with pytest.raises(MeasureError):
        measure_allocations(tmp_path / "bad.gguf", Settings(n_ctx=512))
