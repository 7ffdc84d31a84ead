"""DeepSeek-V3.2's cache (DSA) by part, against llama.cpp's own allocation of tiny deepseek32 fixtures.

llama_kv_cache_dsa builds two llama_kv_cache objects and each logs its `llama_kv_cache: size = ...`
line: first the MLA cache (one latent row of kv_lora_rank + rope per token), then the lightning
indexer's (one key of indexer.key_length per token, the same cells, streams and type). Cells,
layers and streams are compared exactly; bytes at the print resolution (+-5243 bytes per line), as
tests/planner/test_kv_deepseek4.py does. Files are loaded for real (buffers allocated) on the CPU.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_deepseek32
from vrampilot.gguf.spec import ModelSpec, load_model_spec
from vrampilot.planner.cache_table import parts_of
from vrampilot.planner.kv import effective_ctx, effective_ubatch, kv_cache_bytes, kv_refusal, row_bytes
from vrampilot.planner.measure import PRINT_RESOLUTION_BYTES, MeasuredBuffers, matches_print, measure_allocations
from vrampilot.planner.settings import Settings

pytest.importorskip("llama_cpp")


@dataclass(frozen=True)
class UnifiedSettings(Settings):
    kv_unified: bool = True


# Layer count, dense lead, latent and rope widths, indexer dims move between shapes (the indexer's
# key length must be a power of two of at least 64: llama.cpp rotates it with one Hadamard matrix).
SHAPES: dict[str, dict[str, Any]] = {
    "default": {},  # 3 layers (1 dense), kv_lora_rank 128 + rope 32, indexer 4 x 64
    "wide": {"n_layer": 5, "kv_lora_rank": 256, "rope_dim": 64, "head_dim_k_mla": 128, "indexer_head_dim": 128},
    "deep-indexer": {"n_layer": 2, "n_dense_lead": 0, "indexer_n_head": 8, "indexer_head_dim": 256},
    # V3.2's own latent (512 + 64) and indexer (128) widths, on four small layers
    "v32-widths": {"n_layer": 4, "kv_lora_rank": 512, "rope_dim": 64, "head_dim_k_mla": 192, "indexer_head_dim": 128},
}


def _settings_grid() -> list[Settings]:
    out: list[Settings] = []
    seqs = ((1, True), (3, True), (3, False))
    types = (("f16", True), ("f16", False), ("q8_0", True), ("q4_0", True), ("bf16", False))
    for i, (ctx, (n_seq, unified), (kv_type, fa)) in enumerate(
        itertools.product((512, 4096, 20000, 70000), seqs, types)
    ):
        out.append(
            UnifiedSettings(
                n_ctx=ctx,
                n_seq=n_seq,
                kv_unified=unified,
                type_k=kv_type,
                type_v=kv_type,
                flash_attn=fa,
                n_ubatch=(128, 512)[i % 2],
            )
        )
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dsa")
    return {name: write_deepseek32(d / f"{name}.gguf", **shape) for name, shape in SHAPES.items()}


def assert_parts_match(spec: ModelSpec, settings: Settings, m: MeasuredBuffers) -> None:
    assert m.refused is None, m.refused
    assert (m.n_ctx, m.n_ubatch) == (effective_ctx(spec, settings), effective_ubatch(spec, settings)), settings
    assert any("creating indexer KV cache" in line for line in m.log)
    kv = kv_cache_bytes(spec, settings)
    assert [p.name for p in kv.parts] == ["mla", "indexer"]
    assert len(m.kv_lines) == 2, (settings, m.kv_lines)
    for p, line in zip(kv.parts, m.kv_lines, strict=True):
        assert (line.cells, line.layers, line.n_stream, line.v_bytes) == (p.cells, p.layers, p.streams, 0), (
            settings,
            line,
            p,
        )
        assert line.type_k == settings.type_k
        assert matches_print(p.bytes, line.size_bytes), (settings, line, p)
    indexer = kv.parts[1]
    assert indexer.bytes == row_bytes(settings.type_k, spec.indexer_head_size) * indexer.cells * indexer.streams * (
        indexer.layers
    )
    assert abs(kv.total_bytes - m.kv_bytes) <= 2 * PRINT_RESOLUTION_BYTES, settings
    assert sum(kv.per_layer_bytes) == kv.total_bytes == sum(p.bytes for p in kv.parts) == kv.k_bytes


@pytest.mark.parametrize("shape", SHAPES)
def test_mla_and_indexer_caches_match_llama_cpps_allocation(files: dict[str, Path], shape: str) -> None:
    spec = load_model_spec(files[shape])
    for s in _settings_grid():
        assert kv_refusal(spec, s) is None, s
        m = measure_allocations(files[shape], s, dry_run=False)
        assert_parts_match(spec, s, m)
        # the buffers llama.cpp really allocated: one KV buffer per cache
        assert abs(sum(m.kv_buffer_bytes.values()) - kv_cache_bytes(spec, s).total_bytes) <= 2 * PRINT_RESOLUTION_BYTES


def test_dry_run_reports_the_same_parts(files: dict[str, Path]) -> None:
    """The planner's dry runs (no allocation) see the same two caches as a real load."""
    spec = load_model_spec(files["wide"])
    for s in _settings_grid()[::4]:
        assert_parts_match(spec, s, measure_allocations(files["wide"], s, dry_run=True))


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
