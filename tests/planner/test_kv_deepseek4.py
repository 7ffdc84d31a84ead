"""DeepSeek-V4's cache by part, against llama.cpp's own allocation of tiny deepseek4 fixtures.

llama_kv_cache_dsv4 logs each of its caches (`llama_kv_cache: size = ... (N cells, L layers,
S/T seqs)`: the raw cache's empty non-window half, then window, CSA, HCA, indexer) and each
compressor state (`llama_dsv4_comp_state: csa ratio = 4, state = R x W, streams = P, ...`). Cells,
layers, streams, state rows and widths are compared exactly; bytes at the print resolution
(+-5243 bytes per line), as tests/planner/test_kv.py does for every other family. Files are loaded
for real (weights read, buffers allocated) on the CPU.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_deepseek4
from vrampilot.gguf.spec import ModelSpec, load_model_spec
from vrampilot.planner.kv import effective_ctx, effective_ubatch, kv_cache_bytes, kv_refusal
from vrampilot.planner.measure import PRINT_RESOLUTION_BYTES, MeasuredBuffers, matches_print, measure_allocations
from vrampilot.planner.settings import Settings

pytest.importorskip("llama_cpp")


@dataclass(frozen=True)
class UnifiedSettings(Settings):
    kv_unified: bool = True


@dataclass(frozen=True)
class RollbackSettings(UnifiedSettings):
    """With n_rs_seq rollback snapshots per sequence (llama-server's MTP drafting asks for them)."""

    n_rs_seq: int = 0


# Layer count, ratio pattern, window, head and indexer dims all move between shapes. Patterns
# without a ratio-4 layer (or without a ratio-128 layer when key_length equals the indexer's) crash
# llama.cpp; the spec refuses them (tests/gguf/test_deepseek4_header.py).
SHAPES: dict[str, dict[str, Any]] = {
    "default": {},  # 4 layers, ratios 0/4/128/4, window 128, head 64, indexer 64
    "wide": {
        "n_layer": 6,
        "compress_ratios": (4, 4, 128, 0, 128, 4),
        "sliding_window": 256,
        "head_dim": 128,
        "indexer_head_dim": 128,
        "rope_dim": 32,
    },
    "no-hca": {"n_layer": 3, "compress_ratios": (4, 0, 4), "sliding_window": 64, "head_dim": 128},
    "csa-only": {
        "n_layer": 5,
        "compress_ratios": (4, 4, 4, 4, 4),
        "sliding_window": 512,
        "n_head": 6,
        "o_groups": 3,
        "head_dim": 192,
        "indexer_head_dim": 128,
        "rope_dim": 64,
    },
    "two-layers": {"n_layer": 2, "compress_ratios": (128, 4), "sliding_window": 200},
    # an MTP block: in the main context it has window, CSA and indexer caches but no compressor state
    "mtp": {"n_layer": 5, "compress_ratios": (0, 4, 128, 4, 4), "n_nextn": 1},
}

PART_LINES = ("window", "csa", "hca", "indexer")  # after the raw cache's empty first line
STATE_NAMES = {"csa": "csa state", "hca": "hca state", "lid": "indexer state"}


def _settings_grid() -> list[Settings]:
    out: list[Settings] = []
    seqs = ((1, True), (3, True), (3, False))
    types = (("f16", True), ("f16", False), ("q8_0", True), ("q4_0", True), ("bf16", False))
    for i, (ctx, (n_seq, unified), swa_full, (kv_type, fa)) in enumerate(
        itertools.product((512, 4096, 70000), seqs, (False, True), types)
    ):
        out.append(
            UnifiedSettings(
                n_ctx=ctx,
                n_seq=n_seq,
                kv_unified=unified,
                swa_full=swa_full,
                type_k=kv_type,
                type_v=kv_type,
                flash_attn=fa,
                n_ubatch=(128, 512, 2048)[i % 3],
            )
        )
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dsv4")
    return {name: write_deepseek4(d / f"{name}.gguf", **shape) for name, shape in SHAPES.items()}


def assert_parts_match(spec: ModelSpec, settings: Settings, m: MeasuredBuffers) -> None:
    assert m.refused is None, m.refused
    assert (m.n_ctx, m.n_ubatch) == (effective_ctx(spec, settings), effective_ubatch(spec, settings)), settings
    kv = kv_cache_bytes(spec, settings)
    parts = {p.name: p for p in kv.parts}
    base, *lines = m.kv_lines
    assert (base.cells, base.layers, base.size_bytes) == (kv.n_cells, 0, 0), (settings, base)
    assert len(lines) == len(PART_LINES), (settings, m.kv_lines)
    for name, line in zip(PART_LINES, lines, strict=True):
        p = parts[name]
        got = (line.cells, line.layers, line.n_stream, line.v_bytes)
        assert got == (p.cells, p.layers, p.streams, 0), (settings, name, line, p)
        assert line.type_k == settings.type_k
        assert matches_print(p.bytes, line.size_bytes), (settings, name, line, p)
    assert len(m.state_lines) == 3, (settings, m.state_lines)
    for state in m.state_lines:
        p = parts[STATE_NAMES[state.name]]
        planes = state.n_stream * (1 + state.rs_seq)  # each stream, and its rollback snapshots
        assert (state.rows, planes, state.layers) == (p.cells, p.streams, p.layers), (settings, state, p)
        assert 2 * state.rows * state.width * 4 * planes * state.layers == p.bytes, (settings, state, p)
        assert matches_print(p.bytes, state.size_bytes), (settings, state, p)
    n_lines = len(m.kv_lines) + len(m.state_lines)
    assert abs(kv.total_bytes - m.kv_bytes) <= n_lines * PRINT_RESOLUTION_BYTES, settings
    assert sum(kv.per_layer_bytes) == kv.total_bytes == sum(p.bytes for p in kv.parts)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_part_matches_llama_cpps_allocation(files: dict[str, Path], shape: str) -> None:
    spec = load_model_spec(files[shape])
    for s in _settings_grid():
        assert kv_refusal(spec, s) is None, s
        m = measure_allocations(files[shape], s, dry_run=False)
        assert_parts_match(spec, s, m)
        # the buffers llama.cpp really allocated: its KV buffers and the state buffers
        assert abs(sum(m.kv_buffer_bytes.values()) - kv_cache_bytes(spec, s).total_bytes) <= 8 * PRINT_RESOLUTION_BYTES


def test_dry_run_reports_the_same_parts(files: dict[str, Path]) -> None:
    """The planner's dry runs (no allocation) see the same caches as a real load."""
    spec = load_model_spec(files["wide"])
    for s in _settings_grid()[::5]:
        assert_parts_match(spec, s, measure_allocations(files["wide"], s, dry_run=True))


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
    assert_parts_match(spec, s, m)
    assert {p.streams for p in kv_cache_bytes(spec, s).parts[4:]} == {n_seq * (1 + n_rs_seq)}
