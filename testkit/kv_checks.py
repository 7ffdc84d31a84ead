"""Checks of the caches kv.py counts by part (DeepSeek-V4, DeepSeek-V3.2) against llama.cpp's log.

Shared by the CPU tests (tests/planner/test_kv_deepseek4.py, test_kv_deepseek32.py) and the
Vulkan ones (tests/gpu/test_vulkan_kv_parts.py): the settings they sweep, and the comparison of
kv.py's parts with llama.cpp's `llama_kv_cache: size = ...` lines (cells, layers, streams and type
exactly, bytes at the print resolution) and its DeepSeek-V4 compressor-state lines.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vrampilot.gguf import ModelSpec
from vrampilot.planner.dry_run.log_lines import (
    PRINT_RESOLUTION_BYTES,
    KvLine,
    MeasuredBuffers,
    StateLine,
    matches_print,
)
from vrampilot.planner.memory.kv import KvPart, effective_ctx, effective_ubatch, kv_cache_bytes, row_bytes
from vrampilot.planner.settings import Settings

# Layer count, ratio pattern, window, head and indexer dims all move between shapes. Patterns
# without a ratio-4 layer (or without a ratio-128 layer when key_length equals the indexer's) crash
# llama.cpp; the spec refuses them (tests/gguf/test_deepseek4_header.py).
DSV4_SHAPES: dict[str, dict[str, Any]] = {
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


# Layer count, dense lead, latent and rope widths, indexer dims move between shapes (the indexer's
# key length must be a power of two of at least 64: llama.cpp rotates it with one Hadamard matrix).
DSA_SHAPES: dict[str, dict[str, Any]] = {
    "default": {},  # 3 layers (1 dense), kv_lora_rank 128 + rope 32, indexer 4 x 64
    "wide": {"n_layer": 5, "kv_lora_rank": 256, "rope_dim": 64, "head_dim_k_mla": 128, "indexer_head_dim": 128},
    "deep-indexer": {"n_layer": 2, "n_dense_lead": 0, "indexer_n_head": 8, "indexer_head_dim": 256},
    # V3.2's own latent (512 + 64) and indexer (128) widths, on four small layers
    "v32-widths": {"n_layer": 4, "kv_lora_rank": 512, "rope_dim": 64, "head_dim_k_mla": 192, "indexer_head_dim": 128},
}


@dataclass(frozen=True)
class UnifiedSettings(Settings):
    """Settings that say whether the cache is unified (llama_context_params.kv_unified)."""

    kv_unified: bool = True


@dataclass(frozen=True)
class RollbackSettings(UnifiedSettings):
    """With n_rs_seq rollback snapshots per sequence (llama-server's MTP drafting asks for them)."""

    n_rs_seq: int = 0

    @property
    def rollback_snapshots(self) -> int:
        return self.n_rs_seq


@dataclass(frozen=True)
class DraftSettings(RollbackSettings):
    """A plan that drafts with the model's own MTP block (Settings.spec_type "mtp"): llama.cpp loads
    it (load_mtp) and runs it in a second context of type MTP, with a cache of its own (kv.py's
    "mtp draft" part); n_rs_seq as the test asks (llama-server asks draft_n_max)."""

    spec_type: str = "mtp"
    draft_n_max: int = 1


def drafting_mtp(s: Settings, n_rs_seq: int = 0) -> DraftSettings:
    """`s` drafting one token per step with the model's MTP block."""
    return DraftSettings(
        **{**s.__dict__, "spec_type": "mtp", "draft_n_max": max(1, s.draft_n_max), "n_rs_seq": n_rs_seq}
    )


# (n_seq, unified): one sequence, several sharing one stream, several with a stream each
SEQ_LAYOUTS = ((1, True), (3, True), (3, False))
# (K/V type, flash attention): quantized types need flash attention (a quantized V does)
CACHE_TYPES = (("f16", True), ("f16", False), ("q8_0", True), ("q4_0", True), ("bf16", False))


def settings_grid(
    contexts: Iterable[int],
    ubatches: Sequence[int],
    swa_full: Iterable[bool] = (False,),
    seqs: Iterable[tuple[int, bool]] = SEQ_LAYOUTS,
    types: Iterable[tuple[str, bool]] = CACHE_TYPES,
    n_gpu_layers: int = 0,
) -> list[Settings]:
    """Every combination of the axes; the micro-batch turns with the combination's index."""
    out: list[Settings] = []
    for i, (ctx, (n_seq, unified), full, (kv_type, fa)) in enumerate(
        itertools.product(contexts, seqs, swa_full, types)
    ):
        out.append(
            UnifiedSettings(
                n_ctx=ctx,
                n_seq=n_seq,
                kv_unified=unified,
                swa_full=full,
                type_k=kv_type,
                type_v=kv_type,
                flash_attn=fa,
                n_ubatch=ubatches[i % len(ubatches)],
                n_gpu_layers=n_gpu_layers,
            )
        )
    return out


def assert_context_matches(spec: ModelSpec, settings: Settings, m: MeasuredBuffers) -> None:
    """llama.cpp accepted the settings and sized its cache with the context and micro-batch kv.py uses."""
    assert m.refused is None, m.refused
    assert (m.n_ctx, m.n_ubatch) == (effective_ctx(spec, settings), effective_ubatch(spec, settings)), settings


def assert_k_only_lines_match(settings: Settings, parts: Sequence[KvPart], lines: Sequence[KvLine]) -> None:
    """Each K-only cache llama.cpp logged is the part kv.py counts, in the same order."""
    assert len(lines) == len(parts), (settings, lines, parts)
    for p, line in zip(parts, lines, strict=True):
        got = (line.cells, line.layers, line.n_stream, line.v_bytes)
        assert got == (p.cells, p.layers, p.streams, 0), (settings, p.name, line, p)
        assert line.type_k == settings.type_k, (settings, line)
        assert matches_print(p.bytes, line.size_bytes), (settings, p.name, line, p)


DSV4_CACHE_PARTS = ("window", "csa", "hca", "indexer")  # after the raw cache's empty first line
DSV4_STATE_PARTS = {"csa": "csa state", "hca": "hca state", "lid": "indexer state"}


def assert_dsv4_parts_match(spec: ModelSpec, settings: Settings, m: MeasuredBuffers) -> None:
    """DeepSeek-V4: every cache and compressor state llama_kv_cache_dsv4 logs is kv.py's part."""
    assert_context_matches(spec, settings, m)
    kv = kv_cache_bytes(spec, settings)
    parts = {p.name: p for p in kv.parts}
    base, *lines = m.kv_lines
    assert (base.cells, base.layers, base.size_bytes) == (kv.n_cells, 0, 0), (settings, base)
    assert_k_only_lines_match(settings, [parts[n] for n in DSV4_CACHE_PARTS], lines)
    assert len(m.state_lines) == 3, (settings, m.state_lines)
    for state in m.state_lines:
        assert_state_matches(settings, parts[DSV4_STATE_PARTS[state.name]], state)
    n_lines = len(m.kv_lines) + len(m.state_lines)
    main = kv.total_bytes - (kv.draft.bytes if kv.draft else 0)
    assert abs(main - m.kv_bytes) <= n_lines * PRINT_RESOLUTION_BYTES, settings
    assert sum(kv.per_layer_bytes) == kv.total_bytes and main == sum(p.bytes for p in kv.parts)
    assert_draft_matches(spec, settings, m)


def assert_draft_matches(spec: ModelSpec, settings: Settings, m: MeasuredBuffers) -> None:
    """With MTP drafting, the draft context's cache (its one non-empty line) is kv.py's "mtp draft"."""
    draft = kv_cache_bytes(spec, settings).draft
    if m.draft is None:
        assert draft is None, (settings, draft)
        return
    assert draft is not None, settings
    used = [line for line in m.draft.kv_lines if line.layers]
    assert len(used) == 1, (settings, m.draft.kv_lines)
    line = used[0]
    assert (line.cells, line.layers, line.n_stream) == (draft.cells, draft.layers, draft.streams), (settings, line)
    # its cache types are the draft's (-ctkd/-ctvd), as for a draft model (common_base_params_to_speculative)
    assert (line.type_k, line.type_v) == (settings.draft_type_k, settings.draft_type_v), (settings, line)
    assert matches_print(draft.bytes, line.size_bytes), (settings, line, draft)
    assert m.draft.refused is None and not m.draft.state_lines, settings


def assert_state_matches(settings: Settings, p: KvPart, state: StateLine) -> None:
    planes = state.n_stream * (1 + state.rs_seq)  # each stream, and its rollback snapshots
    assert (state.rows, planes, state.layers) == (p.cells, p.streams, p.layers), (settings, state, p)
    assert 2 * state.rows * state.width * 4 * planes * state.layers == p.bytes, (settings, state, p)
    assert matches_print(p.bytes, state.size_bytes), (settings, state, p)


def assert_dsa_parts_match(spec: ModelSpec, settings: Settings, m: MeasuredBuffers) -> None:
    """DeepSeek-V3.2: the MLA cache and the lightning indexer's are kv.py's two parts."""
    assert_context_matches(spec, settings, m)
    assert any("creating indexer KV cache" in line for line in m.log)
    kv = kv_cache_bytes(spec, settings)
    assert [p.name for p in kv.parts] == ["mla", "indexer"]
    assert_k_only_lines_match(settings, kv.parts, m.kv_lines)
    indexer = kv.parts[1]  # one key of indexer.key_length per cell and layer
    row = row_bytes(settings.type_k, spec.indexer_head_size)
    assert indexer.bytes == row * indexer.cells * indexer.streams * indexer.layers
    main = kv.total_bytes - (kv.draft.bytes if kv.draft else 0)
    assert abs(main - m.kv_bytes) <= 2 * PRINT_RESOLUTION_BYTES, settings
    assert sum(kv.per_layer_bytes) == kv.total_bytes and main == sum(p.bytes for p in kv.parts) == kv.k_bytes
    assert_draft_matches(spec, settings, m)
