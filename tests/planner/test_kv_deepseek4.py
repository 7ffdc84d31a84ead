"""DeepSeek-V4's cache by part, against llama.cpp's own allocation of tiny deepseek4 fixtures.

llama_kv_cache_dsv4 logs each of its caches (`llama_kv_cache: size = ... (N cells, L layers,
S/T seqs)`: the raw cache's empty non-window half, then window, CSA, HCA, indexer) and each
compressor state (`llama_dsv4_comp_state: csa ratio = 4, state = R x W, streams = P, ...`). Cells,
layers, streams, state rows and widths are compared exactly; bytes at the print resolution
(+-5243 bytes per line), as tests/planner/test_kv.py does for every other family. Files are loaded
for real (weights read, buffers allocated) on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.gguf_models import write_deepseek4
from testkit.kv_checks import DSV4_SHAPES, RollbackSettings, assert_dsv4_parts_match, settings_grid
from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.log_lines import PRINT_RESOLUTION_BYTES
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.kv import kv_cache_bytes, kv_refusal
from vrampilot.planner.settings import Settings

pytest.importorskip("llama_cpp")


def _settings_grid() -> list[Settings]:
    return settings_grid((512, 4096, 70000), (128, 512, 2048), swa_full=(False, True))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dsv4")
    return {name: write_deepseek4(d / f"{name}.gguf", **shape) for name, shape in DSV4_SHAPES.items()}


@pytest.mark.parametrize("shape", DSV4_SHAPES)
def test_every_part_matches_llama_cpps_allocation(files: dict[str, Path], shape: str) -> None:
    spec = load_model_spec(files[shape])
    for s in _settings_grid():
        assert kv_refusal(spec, s) is None, s
        m = measure_allocations(files[shape], s, dry_run=False)
        assert_dsv4_parts_match(spec, s, m)
        # the buffers llama.cpp really allocated: its KV buffers and the state buffers
        assert abs(sum(m.kv_buffer_bytes.values()) - kv_cache_bytes(spec, s).total_bytes) <= 8 * PRINT_RESOLUTION_BYTES


def test_dry_run_reports_the_same_parts(files: dict[str, Path]) -> None:
    """The planner's dry runs (no allocation) see the same caches as a real load."""
    spec = load_model_spec(files["wide"])
    for s in _settings_grid()[::5]:
        assert_dsv4_parts_match(spec, s, measure_allocations(files["wide"], s, dry_run=True))


def test_the_compressed_cache_is_small_at_long_context(files: dict[str, Path]) -> None:
    """What the family is for: at 64K tokens the CSA cache is a quarter of a full cache, HCA 1/128."""
    spec = load_model_spec(files["wide"])
    kv = kv_cache_bytes(spec, Settings(n_ctx=65536))
    parts = {p.name: p for p in kv.parts}
    full_row = 2 * spec.head_dim_k  # f16 bytes of one token's K row in one layer
    assert parts["csa"].bytes == full_row * 65536 // 4 * 3
    assert parts["hca"].bytes == full_row * 65536 // 128 * 2
    assert parts["window"].cells == 256 + 512 and parts["window"].layers == spec.n_layer


def test_different_k_and_v_types_are_refused_as_llama_cpp_does(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["default"])
    s = Settings(n_ctx=512, type_k="q8_0", type_v="f16")
    reason = kv_refusal(spec, s)
    assert reason is not None
    assert measure_allocations(files["default"], s).refused == reason


def test_an_mtp_block_has_caches_but_no_state(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["mtp"])
    assert (spec.n_layer, spec.n_layer_nextn) == (5, 1)
    parts = {p.name: p for p in kv_cache_bytes(spec, Settings(n_ctx=4096)).parts}
    assert (parts["window"].layers, parts["csa"].layers, parts["indexer"].layers) == (5, 3, 3)
    assert (parts["csa state"].layers, parts["indexer state"].layers) == (2, 2)


@pytest.mark.parametrize(("n_seq", "n_rs_seq"), [(1, 3), (2, 1)])
def test_rollback_snapshots_multiply_the_states(files: dict[str, Path], n_seq: int, n_rs_seq: int) -> None:
    spec = load_model_spec(files["wide"])
    s = RollbackSettings(n_ctx=4096, n_seq=n_seq, kv_unified=False, n_rs_seq=n_rs_seq)
    m = measure_allocations(files["wide"], s, dry_run=False)
    assert {state.rs_seq for state in m.state_lines} == {n_rs_seq}
    assert_dsv4_parts_match(spec, s, m)
    assert {p.streams for p in kv_cache_bytes(spec, s).parts[4:]} == {n_seq * (1 + n_rs_seq)}
