"""The cache explained (planner/search/cache_table.py): parts that add up to the one memory model's total,
and "what if" caches that equal the real cache when the model already has that layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.gguf_models import write_deepseek4, write_model
from vrampilot.gguf import load_model_spec
from vrampilot.planner.memory.kv import kv_cache_bytes
from vrampilot.planner.search.cache_table import CONTEXTS, cache_table
from vrampilot.planner.settings import Settings

F16 = Settings(n_ctx=0, type_k="f16", type_v="f16", flash_attn=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cache_table")
    return {
        "dsv4": write_deepseek4(d / "dsv4.gguf", sparse=True, n_layer=6, compress_ratios=(0, 4, 128, 4, 128, 4)),
        "mha": write_model(d / "llama.gguf", "llama"),  # 4 heads, 4 KV heads
        "gqa": write_model(d / "gqa.gguf", "llama", n_head=16, n_head_kv=8, n_embd=256),
        "mla": write_model(
            d / "mla.gguf", "deepseek2", kv_lora_rank=512, rope_dim=64, head_dim_k_mla=192, head_dim_v_mla=128
        ),
        "swa": write_model(d / "gemma2.gguf", "gemma2"),
    }


def test_deepseek4_parts_add_up_to_the_memory_models_total(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["dsv4"])
    table = cache_table(spec, F16)
    assert [r.n_ctx for r in table.rows] == list(CONTEXTS)
    for r in table.rows:
        assert [name for name, _ in r.parts] == ["window", "csa", "hca", "indexer", "state"]
        assert sum(b for _, b in r.parts) == r.total_bytes
        assert r.total_bytes == kv_cache_bytes(spec, Settings(n_ctx=r.n_ctx)).total_bytes
        assert [name for name, _ in r.what_if] == ["MHA", "GQA", "MLA"]
    # compressed along the sequence: at 1M tokens far below any plain cache of the same layers
    last = table.rows[-1]
    assert all(last.total_bytes < b / 5 for _, b in last.what_if)


def test_other_families_show_their_k_v_split(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["swa"])
    settings = Settings(n_ctx=0, type_k="q8_0", type_v="q8_0")
    for r in cache_table(spec, settings).rows:
        kv = kv_cache_bytes(spec, Settings(n_ctx=r.n_ctx, type_k="q8_0", type_v="q8_0"))
        assert dict(r.parts) == {"K": kv.k_bytes, "V": kv.v_bytes}
    assert cache_table(spec, settings).type_k == "q8_0"


@pytest.mark.parametrize(("key", "variant"), [("mha", "MHA"), ("gqa", "GQA"), ("mla", "MLA")])
def test_a_what_if_of_the_models_own_layout_is_its_real_cache(files: dict[str, Path], key: str, variant: str) -> None:
    spec = load_model_spec(files[key])
    for r in cache_table(spec, F16).rows:
        assert dict(r.what_if)[variant] == r.total_bytes


def test_assumptions_name_each_variant(files: dict[str, Path]) -> None:
    table = cache_table(load_model_spec(files["dsv4"]), F16)
    assert [a.split(":")[0] for a in table.assumptions] == ["MHA", "GQA", "MLA"]
    assert "kv_lora_rank 512 + rope 64" in table.assumptions[2]
    assert table.as_dict()["rows"][0]["what_if"].keys() == {"MHA", "GQA", "MLA"}
