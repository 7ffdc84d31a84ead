"""Sparse GGUFs at published dimensions (testkit/real_shapes.py): what the planner reads from them,
the 1M-token caches against llama.cpp's own dry run (no allocation, header only), and the MoE set
bench/planner.py --moe plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.real_shapes import FILES, MOE_FILES, disk_bytes, write_all
from vrampilot.gguf.spec import load_model_spec
from vrampilot.planner.dry_run.log_lines import matches_print
from vrampilot.planner.dry_run.measure import measure_allocations
from vrampilot.planner.memory.kv import kv_cache_bytes
from vrampilot.planner.settings import Settings

GIB = 2**30
CTX_1M = 1048576


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("real"))


def test_files_are_sparse_at_their_real_size(real: dict[str, Path]) -> None:
    assert set(real) == set(FILES)
    for path in real.values():
        assert path.stat().st_size > 10 * GIB  # Qwen3-30B-A3B at Q4_K_M: 17 GiB; the others > 100 GiB
        assert disk_bytes(path) < 4 * 2**20


def test_model_spec_reads_the_published_dimensions(real: dict[str, Path]) -> None:
    pro = load_model_spec(real["v4-pro"])
    assert (pro.architecture, pro.n_layer, pro.n_embd, pro.head_dim_k, pro.indexer_head_size) == (
        "deepseek4",
        61,
        7168,
        512,
        128,
    )
    assert pro.compress_ratios[:4] == (128, 128, 4, 128) and pro.n_ctx_train == CTX_1M
    flash = load_model_spec(real["v4-flash"])
    assert flash.n_layer == 43 and flash.compress_ratios[:4] == (0, 0, 4, 128)
    v32 = load_model_spec(real["v3.2"])
    assert v32.architecture == "deepseek32" and v32.is_mla and v32.head_dim_k == 576
    assert v32.indexer_head_size == 128 and v32.compress_ratios == ()
    llama = load_model_spec(real["llama-405b"])
    assert llama.n_layer == 126 and set(llama.n_head_kv) == {8} and llama.head_dim_k == 128
    assert 400e9 < llama.n_params < 410e9
    qwen = load_model_spec(real["qwen3-30b-a3b"])
    assert (qwen.architecture, qwen.n_layer, qwen.n_embd, qwen.head_dim_k, qwen.n_expert, qwen.n_expert_used) == (
        "qwen3moe",
        48,
        2048,
        128,
        128,
        8,
    )
    assert 30e9 < qwen.n_params < 31e9 and len(qwen.layer_expert_bytes) == 48


pytest.importorskip("llama_cpp")


@pytest.mark.parametrize("key", ["v4-flash", "v4-pro", "v3.2", "llama-405b", "qwen3-30b-a3b"])
def test_cache_at_1m_equals_llama_cpps_dry_run(real: dict[str, Path], key: str) -> None:
    settings = Settings(n_ctx=CTX_1M, n_threads=1, n_threads_batch=1)
    ours = kv_cache_bytes(load_model_spec(real[key]), settings)
    m = measure_allocations(real[key], settings, dry_run=True)
    assert m.refused is None
    n_lines = len(m.kv_lines) + len(m.state_lines)  # each printed to 0.01 MiB
    assert abs(ours.total_bytes - m.kv_bytes) <= n_lines * 0.005 * 2**20
    if ours.parts:
        printed = [int(line.size_mib * 2**20) for line in m.kv_lines if line.layers]
        assert all(matches_print(p.bytes, b) for p, b in zip(ours.parts[:4], printed, strict=True))


# The MoE set (bench/planner.py --moe): each file loads in llama.cpp's dry run, the cache equals
# llama.cpp's, and the routed experts the placement works with are where the config puts them.
@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("moe"), tuple(MOE_FILES))


MOE_LAYOUT = {  # key: (architecture, layers in block_count, MTP blocks, layers with routed experts)
    "qwen3-30b-a3b": ("qwen3moe", 48, 0, 48),
    "gpt-oss-20b": ("gpt-oss", 24, 0, 24),
    "gpt-oss-120b": ("gpt-oss", 36, 0, 36),
    "glm-4.5-air": ("glm4moe", 47, 1, 46),  # layer 0 dense; the MTP block 46 has experts too
    "mixtral-8x7b": ("llama", 32, 0, 32),
    "v4-flash": ("deepseek4", 43, 0, 43),
}


@pytest.mark.parametrize("key", list(MOE_FILES))
def test_moe_shape_loads_in_llama_cpps_dry_run(moe: dict[str, Path], key: str) -> None:
    spec = load_model_spec(moe[key])
    arch, n_layer, n_nextn, n_moe = MOE_LAYOUT[key]
    assert (spec.architecture, spec.n_layer, spec.n_layer_nextn) == (arch, n_layer, n_nextn)
    assert sum(1 for b in spec.layer_expert_bytes if b) == n_moe
    assert sum(spec.layer_expert_bytes) > 0.8 * spec.weight_bytes  # experts are most of a MoE file
    settings = Settings(n_ctx=8192, n_threads=1, n_threads_batch=1)
    m = measure_allocations(moe[key], settings, dry_run=True)
    assert m.refused is None
    ours = kv_cache_bytes(spec, settings)
    n_lines = len(m.kv_lines) + len(m.state_lines)
    assert abs(ours.total_bytes - m.kv_bytes) <= n_lines * 0.005 * 2**20
