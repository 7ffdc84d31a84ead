"""DeepSeek-V3.2's cache (DSA) by part, against llama.cpp's own allocation of tiny deepseek32 fixtures.

llama_kv_cache_dsa builds two llama_kv_cache objects and each logs its `llama_kv_cache: size = ...`
line: first the MLA cache (one latent row of kv_lora_rank + rope per token), then the lightning
indexer's (one key of indexer.key_length per token, the same cells, streams and type). Cells,
layers and streams are compared exactly; bytes at the print resolution (+-5243 bytes per line), as
tests/planner/test_kv_deepseek4.py does. Files are loaded for real (buffers allocated) on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.gguf_models import write_deepseek32
from testkit.kv_checks import DSA_SHAPES, assert_dsa_parts_match, settings_grid
from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.log_lines import PRINT_RESOLUTION_BYTES
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.kv import kv_cache_bytes, kv_refusal
from vrampilot.planner.search.cache_table import parts_of
from vrampilot.planner.settings import Settings

pytest.importorskip("llama_cpp")


def _settings_grid() -> list[Settings]:
    return settings_grid((512, 4096, 20000, 70000), (128, 512))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dsa")
    return {name: write_deepseek32(d / f"{name}.gguf", **shape) for name, shape in DSA_SHAPES.items()}


@pytest.mark.parametrize("shape", DSA_SHAPES)
def test_mla_and_indexer_caches_match_llama_cpps_allocation(files: dict[str, Path], shape: str) -> None:
    spec = load_model_spec(files[shape])
    for s in _settings_grid():
        assert kv_refusal(spec, s) is None, s
        m = measure_allocations(files[shape], s, dry_run=False)
        assert_dsa_parts_match(spec, s, m)
        # the buffers llama.cpp really allocated: one KV buffer per cache
        assert abs(sum(m.kv_buffer_bytes.values()) - kv_cache_bytes(spec, s).total_bytes) <= 2 * PRINT_RESOLUTION_BYTES


def test_dry_run_reports_the_same_parts(files: dict[str, Path]) -> None:
    """The planner's dry runs (no allocation) see the same two caches as a real load."""
    spec = load_model_spec(files["wide"])
    for s in _settings_grid()[::4]:
        assert_dsa_parts_match(spec, s, measure_allocations(files["wide"], s, dry_run=True))


def test_the_spec_reads_the_indexer_and_the_table_shows_it(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["wide"])
    assert (spec.architecture, spec.indexer_head_size, spec.compress_ratios, spec.is_mla) == (
        "deepseek32",
        128,
        (),
        True,
    )
    kv = kv_cache_bytes(spec, Settings(n_ctx=8192))
    # per token and layer: the f16 latent row (256 + 64) and the indexer key (128)
    assert dict(parts_of(kv)) == {"mla": 2 * 320 * 8192 * 5, "indexer": 2 * 128 * 8192 * 5}


def test_different_k_and_v_types_are_refused_as_llama_cpp_does(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["default"])
    s = Settings(n_ctx=512, type_k="q8_0", type_v="f16")
    reason = kv_refusal(spec, s)
    assert reason is not None
    assert measure_allocations(files["default"], s).refused == reason
