"""Every fixture architecture: our spec reads the hyperparameters written, and llama.cpp loads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from testkit.gguf_models import (
    ARCHITECTURES,
    header_tensor_types,
    shape_of,
    tensor_table,
    write_header_only,
    write_model,
    write_qwen25_7b_q4_k_m,
)
from vrampilot.gguf.spec import load_model_spec
from vrampilot.planner.settings import Settings


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("arch")
    return {a: write_model(d / f"{a}.gguf", a) for a in ARCHITECTURES}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_spec_reads_written_hyperparameters(files: dict[str, Path], arch: str) -> None:
    s = shape_of(arch)
    spec = load_model_spec(files[arch])
    assert spec.architecture == s.arch
    assert spec.n_layer == s.n_layer
    assert spec.n_embd == s.n_embd
    assert spec.n_vocab == s.n_vocab
    assert spec.n_head == (s.n_head,) * s.n_layer
    assert spec.n_head_kv == (s.n_head_kv,) * s.n_layer
    assert spec.n_ff == (s.n_ff,) * s.n_layer
    assert spec.n_ctx_train == s.n_ctx_train
    if arch == "deepseek2":
        assert spec.is_mla
        assert spec.kv_lora_rank == s.kv_lora_rank
        assert spec.head_dim_k == s.kv_lora_rank + s.rope_dim  # the latent row the cache stores
        assert spec.head_dim_v == s.kv_lora_rank
        assert (spec.head_dim_k_mla, spec.head_dim_v_mla) == (s.head_dim_k_mla, s.head_dim_v_mla)
    else:
        assert not spec.is_mla
        assert spec.head_dim_k == s.key_length()
        assert spec.head_dim_v == s.value_length()
    if s.n_expert:
        assert (spec.n_expert, spec.n_expert_used) == (s.n_expert, s.n_expert_used)
        assert spec.n_ff_expert == s.n_ff_expert
    assert spec.tied_embeddings == ("output.weight" not in {t.name for t in spec.tensors})


def test_sliding_window_layouts(files: dict[str, Path]) -> None:
    g2 = load_model_spec(files["gemma2"])
    assert g2.sliding_window == 256 and g2.swa_layers == (True, False, True, False)  # pattern 2
    g3 = load_model_spec(files["gemma3"])
    assert g3.sliding_window == 512 and g3.swa_layers == (True,) * 5 + (False,)  # pattern 6
    oss = load_model_spec(files["gpt-oss"])
    assert oss.sliding_window == 128 and oss.swa_layers == (True, False, True, False)
    # llama.cpp ignores these windows: Mistral-style llama files and Phi-3
    for arch in ("mistral", "phi3"):
        spec = load_model_spec(files[arch])
        assert spec.sliding_window == 0 and not spec.has_swa


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_weight_bytes_is_the_sum_of_tensor_sizes(files: dict[str, Path], arch: str) -> None:
    spec = load_model_spec(files[arch])
    assert spec.weight_bytes == sum(t.n_bytes for t in spec.tensors)
    assert spec.weight_bytes == (
        spec.token_embd_bytes + spec.output_bytes + sum(spec.layer_weight_bytes) + spec.other_weight_bytes
    )
    assert len(spec.tensors) == len(tensor_table(shape_of(arch)))
    data = files[arch].stat().st_size - min(t.offset_bytes for t in spec.tensors)
    assert spec.weight_bytes <= data < spec.weight_bytes + 32 * len(spec.tensors)


@pytest.mark.parametrize("weight_type", ["f32", "q8_0", "q4_0"])
def test_weight_types_are_selectable(tmp_path: Path, weight_type: str) -> None:
    spec = load_model_spec(write_model(tmp_path / "m.gguf", "qwen2", weight_type=weight_type))
    q = spec.tensors[[t.name for t in spec.tensors].index("blk.0.attn_q.weight")]
    assert q.type_name == weight_type.upper()
    assert spec.weight_bytes == sum(t.n_bytes for t in spec.tensors)


def test_gpt_oss_experts_are_mxfp4(files: dict[str, Path]) -> None:
    spec = load_model_spec(files["gpt-oss"])
    types = {t.name.split(".", 2)[-1]: t.type_name for t in spec.layer_tensors(0)}
    assert types["ffn_up_exps.weight"] == "MXFP4"
    assert types["attn_sinks.weight"] == "F32"


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_llama_cpp_loads_and_builds_a_context(files: dict[str, Path], arch: str) -> None:
    pytest.importorskip("llama_cpp")
    from vrampilot.planner.dry_run.measure import measure_allocations

    for flash_attn in (False, True):
        m = measure_allocations(files[arch], Settings(n_ctx=512, n_ubatch=128, flash_attn=flash_attn), dry_run=False)
        assert m.refused is None, m.refused
        assert sum(m.model_bytes.values()) > 0
        assert m.kv_lines and m.compute_total > 0


def test_qwen25_7b_header_only_file(tmp_path: Path) -> None:
    path = write_qwen25_7b_q4_k_m(tmp_path / "Qwen2.5-7B-Instruct-Q4_K_M.gguf")
    spec = load_model_spec(path)
    assert (spec.architecture, spec.n_layer, spec.n_embd, spec.n_vocab) == ("qwen2", 28, 3584, 152064)
    assert spec.n_head == (28,) * 28 and spec.n_head_kv == (4,) * 28
    assert spec.head_dim_k == spec.head_dim_v == 128
    assert spec.n_ff == (18944,) * 28
    assert spec.file_type == "Q4_K_M"
    types = {t.type_name for t in spec.tensors}
    assert {"Q4_K", "Q6_K", "F32"} <= types
    assert 4.5e9 < spec.weight_bytes < 4.8e9  # released file: 4.68 GB, of which ~6 MB tokenizer
    # sparse: the length is right, almost nothing is on disk
    st = path.stat()
    assert st.st_size >= spec.weight_bytes
    if hasattr(st, "st_blocks") and os.name == "posix":
        assert st.st_blocks * 512 < 50 * 1024 * 1024


def test_header_only_recipes_size_every_tensor() -> None:
    s = shape_of("gpt-oss-20b")
    for recipe in ("Q4_K_M", "Q8_0", "F16", "MXFP4"):
        for t, q in header_tensor_types(s, recipe):
            block = GGML_QUANT_SIZES[GGMLQuantizationType(q)][0]
            assert t.ne[0] % block == 0, (recipe, t.name, q)


def test_header_only_files_load_in_a_llama_cpp_dry_run(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from vrampilot.planner.dry_run.measure import measure_allocations

    for key in ("llama-3.1-8b", "gemma-3-27b", "gpt-oss-20b", "deepseek-v2-lite"):
        path = write_header_only(tmp_path / f"{key}.gguf", key)
        m = measure_allocations(path, Settings(n_ctx=4096, n_ubatch=512))
        assert m.refused is None and m.kv_lines, key


@pytest.mark.slow
def test_smollm2_tokenizer_fixture_loads(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner.dry_run.measure import measure_allocations

    if embedded_model_path() is None:
        pytest.skip("embedded model not installed")
    path = write_model(tmp_path / "tok.gguf", "qwen3", tokenizer="smollm2")
    spec = load_model_spec(path)
    assert spec.n_vocab == 49152 and spec.has_chat_template
    assert measure_allocations(path, Settings(n_ctx=512), dry_run=False).refused is None
