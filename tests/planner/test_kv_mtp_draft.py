"""The MTP draft context's cache, against llama.cpp's own allocation of tiny deepseek4 fixtures.

When llama-server drafts with a model's own MTP block (`--spec-type draft-mtp`) it loads the block
(llama_model_params.load_mtp) and creates a second context of type LLAMA_CONTEXT_TYPE_MTP with the
target's n_ctx and sequences (common/speculative.cpp). llama.cpp gives that context a cache of its
own over the MTP layers only: for DeepSeek-V4 a plain sliding-window cache with K and V rows (not
the compressed caches of the main context). Both contexts are created for real here, through
llama-cpp-python's low-level API, and kv.py's "mtp draft" part is compared with the draft context's
`llama_kv_cache: size = ...` line: cells, layers, streams and types exactly, bytes at the print
resolution. The main context's parts are checked as in test_kv_deepseek4.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_deepseek4, write_deepseek32, write_model
from testkit.kv_checks import (
    DSV4_SHAPES,
    DraftSettings,
    assert_context_matches,
    assert_draft_matches,
    assert_dsa_parts_match,
    assert_dsv4_parts_match,
    drafting_mtp,
    settings_grid,
)
from vrampilot.gguf import load_model_spec
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.kv import kv_cache_bytes, kv_refusal
from vrampilot.planner.search.cache_table import parts_of
from vrampilot.planner.settings import Settings

pytest.importorskip("llama_cpp")

# The MTP block must not compress and the key must differ from the indexer's for llama.cpp to
# build the draft context at all (kv_refusal says so; DeepSeek-V4's own are 512 and 128 wide).
SHAPES = {
    "mtp": {**DSV4_SHAPES["mtp"], "compress_ratios": (0, 4, 128, 4, 0), "head_dim": 128},
    "mtp-wide": {
        **DSV4_SHAPES["wide"],
        "n_layer": 7,
        "compress_ratios": (4, 4, 128, 0, 128, 4, 0),
        "n_nextn": 1,
        "indexer_head_dim": 64,
        "sliding_window": 200,
    },
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mtp")
    return {name: write_deepseek4(d / f"{name}.gguf", **shape) for name, shape in SHAPES.items()}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_draft_context_has_the_cache_kv_py_counts(files: dict[str, Path], shape: str) -> None:
    spec = load_model_spec(files[shape])
    assert spec.n_layer_nextn == 1
    grid = settings_grid((512, 4096, 70000), (128, 512, 2048), swa_full=(False, True))
    for i, plain in enumerate(grid[::3]):
        s = drafting_mtp(plain, n_rs_seq=i % 3)  # llama-server's main context keeps rollback snapshots
        assert kv_refusal(spec, s) is None, s
        m = measure_allocations(files[shape], s, dry_run=False)
        assert m.draft is not None
        assert_dsv4_parts_match(spec, s, m)  # the main context, and the draft's cache
        draft = kv_cache_bytes(spec, s).draft
        assert draft is not None and draft.layers == 1
        # the draft's buffers: its cache only, on the device of the MTP layer (here the CPU)
        assert abs(sum(m.draft.kv_buffer_bytes.values()) - draft.bytes) <= 5243


@pytest.mark.parametrize("arch", ["deepseek2", "deepseek32"])
def test_an_mla_draft_context_has_an_mla_cache_over_the_mtp_block(tmp_path: Path, arch: str) -> None:
    """DeepSeek-V2/V3's and V3.2's MTP block drafts through a plain MLA cache of its own (V3.2's
    without the indexer: llama-model.cpp says the draft head runs dense MLA)."""
    path = tmp_path / f"{arch}.gguf"
    if arch == "deepseek2":
        write_model(path, arch, n_layer=4, n_nextn=1)
    else:
        write_deepseek32(path, n_layer=4, n_nextn=1)
    spec = load_model_spec(path)
    assert (spec.n_layer_nextn, spec.is_mla) == (1, True)
    for plain in settings_grid((512, 4096, 70000), (128, 512))[::2]:
        s = drafting_mtp(plain)
        assert kv_refusal(spec, s) is None, s
        m = measure_allocations(path, s, dry_run=False)
        if arch == "deepseek32":
            assert_dsa_parts_match(spec, s, m)
        else:
            assert_context_matches(spec, s, m)
            assert_draft_matches(spec, s, m)
        kv = kv_cache_bytes(spec, s)
        assert kv.draft is not None and kv.draft.layers == 1
        # one latent row (kv_lora_rank + rope) per cell, K only: what each main MLA layer holds
        # in the draft's cache type (-ctkd, f16 by default)
        main = kv_cache_bytes(spec, plain.with_(type_k=s.draft_type_k, type_v=s.draft_type_v))
        per_mla_layer = main.parts[0].bytes // main.parts[0].layers if main.parts else main.per_layer_bytes[0]
        assert kv.draft.bytes == per_mla_layer


def test_the_draft_cache_is_a_window_with_k_and_v(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["mtp"])
    s = DraftSettings(n_ctx=65536, flash_attn=True)
    kv = kv_cache_bytes(spec, s)
    assert kv.draft is not None
    # window 128 + ubatch 512 cells of a 128-wide f16 K row and V row, one layer
    assert (kv.draft.cells, kv.draft.bytes) == (768, 768 * 2 * 128 * 2)
    without = kv_cache_bytes(spec, Settings(n_ctx=65536, flash_attn=True))
    assert without.draft is None
    assert kv.total_bytes == without.total_bytes + kv.draft.bytes
    assert kv.per_layer_bytes[4] == without.per_layer_bytes[4] + kv.draft.bytes
    assert parts_of(kv) == (*parts_of(without), ("mtp draft", kv.draft.bytes))  # as the cache table lists it


def test_no_draft_without_an_mtp_block(tmp_path: Path) -> None:
    spec = load_model_spec(write_deepseek4(tmp_path / "plain.gguf"))
    assert kv_cache_bytes(spec, DraftSettings(n_ctx=4096)).draft is None


@pytest.mark.parametrize(
    ("shape", "reason"),
    [
        ({"compress_ratios": (0, 4, 128, 4, 4), "head_dim": 128}, "the MTP block has compression ratio 4"),
        ({"compress_ratios": (0, 4, 128, 4, 0)}, "key_length equals the indexer's (64)"),
    ],
)
def test_a_draft_llama_cpp_would_crash_on_is_refused(tmp_path: Path, shape: dict[str, Any], reason: str) -> None:
    """llama.cpp asserts or divides by zero building these draft contexts (the process dies)."""
    spec = load_model_spec(write_deepseek4(tmp_path / "bad.gguf", n_layer=5, n_nextn=1, **shape))
    assert reason in (kv_refusal(spec, DraftSettings(n_ctx=4096)) or "")
    assert kv_refusal(spec, Settings(n_ctx=4096)) is None  # without drafting the file is fine
