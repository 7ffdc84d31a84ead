"""KV cache bytes against llama.cpp's own report, configuration by configuration.

llama.cpp prints each cache as `size = X MiB (N cells, L layers, S/T seqs), K (type): X MiB, V ...`
with 2 decimals: cell counts are compared exactly, bytes to that print resolution (+-5243 bytes),
over enough configurations that an off-by-one row or cell would show.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.gguf_models import ARCHITECTURES, write_header_only, write_model
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.paths import embedded_model_path
from vrampilot.planner.dry_run.log_lines import PRINT_RESOLUTION_BYTES, MeasuredBuffers, matches_print
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.kv import effective_ctx, effective_ubatch, kv_cache_bytes, kv_refusal, row_bytes
from vrampilot.planner.settings import KV_CACHE_TYPES, Settings

pytest.importorskip("llama_cpp")


@dataclass(frozen=True)
class UnifiedSettings(Settings):
    """Settings with llama.cpp's kv_unified switch (the planner reads it when present)."""

    kv_unified: bool = True


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("kv-models")
    out = {a: write_model(d / f"{a}.gguf", a) for a in ARCHITECTURES}
    out["qwen2.5-7b"] = write_header_only(d / "qwen2.5-7b.gguf", "qwen2.5-7b")
    out["gemma-3-27b"] = write_header_only(d / "gemma-3-27b.gguf", "gemma-3-27b")
    out["deepseek-v2-lite"] = write_header_only(d / "deepseek-v2-lite.gguf", "deepseek-v2-lite")
    return out


def assert_kv_matches(spec: ModelSpec, settings: Settings, m: MeasuredBuffers) -> None:
    assert m.refused is None, m.refused
    assert (m.n_ctx, m.n_ubatch) == (effective_ctx(spec, settings), effective_ubatch(spec, settings)), settings
    kv = kv_cache_bytes(spec, settings)
    expected = [(kv.n_cells, kv.base_bytes)]
    if spec.has_swa:
        expected.append((kv.n_cells_swa, kv.swa_bytes))
    got = [(line.cells, line.size_bytes) for line in m.kv_lines]
    assert len(got) == len(expected), (settings, got, expected)
    for (cells, size), (exp_cells, exp_bytes) in zip(got, expected, strict=True):
        assert cells == exp_cells, (settings, got, expected)
        assert matches_print(exp_bytes, size), (settings, got, expected)
    # K and V separately, summed over the caches (each line carries its own print rounding)
    slack = len(m.kv_lines) * PRINT_RESOLUTION_BYTES
    assert abs(kv.k_bytes - sum(line.k_bytes for line in m.kv_lines)) <= slack, (settings, m.kv_lines)
    assert abs(kv.v_bytes - sum(line.v_bytes for line in m.kv_lines)) <= slack, (settings, m.kv_lines)


# --------------------------------------------------------------------------------------------
# rules that need no llama.cpp


def test_context_padding_rules() -> None:
    spec = load_model_spec(_embedded())
    assert effective_ctx(spec, Settings(n_ctx=1000)) == 1024
    assert effective_ctx(spec, Settings(n_ctx=1024)) == 1024
    assert effective_ctx(spec, Settings(n_ctx=1025)) == 1280
    assert effective_ctx(spec, Settings(n_ctx=0)) == spec.n_ctx_train
    # separate streams: each gets pad256(n_ctx / n_seq) cells
    assert effective_ctx(spec, UnifiedSettings(n_ctx=1000, n_seq=3, kv_unified=False)) == 3 * 512
    assert effective_ctx(spec, UnifiedSettings(n_ctx=1000, n_seq=3, kv_unified=True)) == 1024
    # the micro-batch is capped by n_batch and by the context
    assert effective_ubatch(spec, Settings(n_ctx=256, n_ubatch=512)) == 256
    assert effective_ubatch(spec, Settings(n_ctx=1000, n_ubatch=2048)) == 1000  # before padding
    assert effective_ubatch(spec, Settings(n_ctx=4096, n_batch=128, n_ubatch=512)) == 128


def test_row_bytes_uses_ggml_blocks() -> None:
    assert row_bytes("f16", 128) == 256
    assert row_bytes("q8_0", 128) == 4 * 34
    assert row_bytes("q4_0", 64) == 2 * 18
    assert row_bytes("iq4_nl", 64) == 2 * 18
    assert row_bytes("q5_1", 32) == 24


def test_qwen7b_32k_f16_cache_is_1_75_gib(models: dict[str, Path]) -> None:
    spec = load_model_spec(models["qwen2.5-7b"])
    kv = kv_cache_bytes(spec, Settings(n_ctx=32768, type_k="f16", type_v="f16"))
    # 28 layers x (K + V) x 4 KV heads x 128 dims x 2 bytes x 32768 cells
    assert kv.total_bytes == 28 * 2 * 4 * 128 * 2 * 32768 == 1792 * 1024 * 1024
    q8 = kv_cache_bytes(spec, Settings(n_ctx=65536, type_k="q8_0", type_v="q8_0"))
    assert q8.total_bytes == 28 * 2 * (4 * 128 // 32 * 34) * 65536


def test_mla_cache_is_one_latent_row(models: dict[str, Path]) -> None:
    spec = load_model_spec(models["deepseek-v2-lite"])
    assert spec.is_mla and spec.head_dim_k == 512 + 64
    kv = kv_cache_bytes(spec, Settings(n_ctx=4096, type_k="f16", type_v="f16"))
    assert kv.v_bytes == 0
    assert kv.k_bytes == spec.n_layer * 576 * 2 * 4096


def test_swa_cells_follow_window_seqs_and_ubatch(models: dict[str, Path]) -> None:
    spec = load_model_spec(models["gemma-3-27b"])  # window 1024, 5 of 6 layers sliding
    s = UnifiedSettings(n_ctx=32768, n_ubatch=512, n_seq=1)
    assert kv_cache_bytes(spec, s).n_cells_swa == 1536  # pad256(1024 + 512)
    assert kv_cache_bytes(spec, s.with_(n_seq=4)).n_cells_swa == 4608  # pad256(4 * 1024 + 512)
    assert kv_cache_bytes(spec, s.with_(n_seq=4, kv_unified=False)).n_cells_swa == 1536  # per stream
    assert kv_cache_bytes(spec, s.with_(swa_full=True)).n_cells_swa == 32768
    assert kv_cache_bytes(spec, s.with_(n_ctx=1000)).n_cells_swa == 1024  # capped by the context
    full = kv_cache_bytes(spec, s.with_(swa_full=True)).total_bytes
    assert kv_cache_bytes(spec, s).total_bytes < full / 4  # "about a fifth of the naive cache"


# --------------------------------------------------------------------------------------------
# against llama.cpp


def test_embedded_model_kv_matches_llama_cpp() -> None:
    path = _embedded()
    spec = load_model_spec(path)
    grid = itertools.product(
        [100, 1000, 4097, 8192], [False, True], [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "f16")]
    )
    for n_ctx, fa, (tk, tv) in grid:
        s = Settings(n_ctx=n_ctx, flash_attn=fa, type_k=tk, type_v=tv)
        if kv_refusal(spec, s) is None:
            assert_kv_matches(spec, s, measure_allocations(path, s))


@pytest.mark.parametrize("arch", [*ARCHITECTURES, "qwen2.5-7b", "gemma-3-27b", "deepseek-v2-lite"])
def test_fixture_kv_matches_llama_cpp(models: dict[str, Path], arch: str) -> None:
    path = models[arch]
    spec = load_model_spec(path)
    grid = itertools.product(
        [300, 1000, 5000],
        [64, 512],
        [(1, True), (3, True), (3, False)],
        [False, True],
    )
    for n_ctx, n_ubatch, (n_seq, unified), swa_full in grid:
        if swa_full and not spec.has_swa:
            continue
        s = UnifiedSettings(n_ctx=n_ctx, n_ubatch=n_ubatch, n_seq=n_seq, kv_unified=unified, swa_full=swa_full)
        assert_kv_matches(spec, s, measure_allocations(path, s))


@pytest.mark.parametrize("arch", ["llama", "gemma2", "deepseek2", "gpt-oss"])
def test_every_cache_type_matches_llama_cpp(models: dict[str, Path], arch: str) -> None:
    path = models[arch]
    spec = load_model_spec(path)
    for tk, tv in itertools.product(KV_CACHE_TYPES, KV_CACHE_TYPES):
        if spec.is_mla and tk != tv:
            continue
        s = Settings(n_ctx=1000, n_ubatch=128, flash_attn=True, type_k=tk, type_v=tv)
        assert_kv_matches(spec, s, measure_allocations(path, s))


# --------------------------------------------------------------------------------------------
# refusals: same reason, same words


def _refusal_cases(models: dict[str, Path], tmp: Path) -> list[tuple[Path, Settings]]:
    odd = write_model(tmp / "head48.gguf", "llama", n_embd=192, n_head=4, n_head_kv=4, rope_dim=48)
    return [
        (models["llama"], Settings(n_ctx=512, flash_attn=False, type_v="q8_0")),
        (models["llama"], Settings(n_ctx=512, flash_attn=False, type_k="q4_0", type_v="q4_0")),
        (models["llama"], Settings(n_ctx=512, flash_attn=False, type_k="q8_0", type_v="f16")),  # accepted
        (models["deepseek2"], Settings(n_ctx=512, flash_attn=True, type_k="q8_0", type_v="f16")),
        (models["deepseek2"], Settings(n_ctx=512, flash_attn=False, type_k="f16", type_v="bf16")),
        (odd, Settings(n_ctx=512, flash_attn=True, type_k="q4_0", type_v="f16")),
        (odd, Settings(n_ctx=512, flash_attn=True, type_k="f16", type_v="q8_0")),
        (odd, Settings(n_ctx=512, flash_attn=False, type_k="q4_0", type_v="f16")),  # no check without FA
    ]


def test_refusals_match_llama_cpp(models: dict[str, Path], tmp_path: Path) -> None:
    seen = set()
    for path, s in _refusal_cases(models, tmp_path):
        spec = load_model_spec(path)
        measured = measure_allocations(path, s)
        assert kv_refusal(spec, s) == measured.refused, (path.name, s)
        seen.add(measured.refused)
    assert "quantized V cache requires flash_attn to be enabled" in seen
    assert "model does not support different K (q8_0) and V (f16) cache types" in seen
    assert "K cache type q4_0 with block size 32 does not divide n_embd_head_k=48" in seen
    assert "V cache type q8_0 with block size 32 does not divide n_embd_head_v=48" in seen
    assert None in seen


def _embedded() -> Path:
    path = embedded_model_path()
    if path is None or not path.is_file():
        pytest.skip("embedded SmolLM2 model not installed")
    return path
