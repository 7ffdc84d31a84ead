"""Sparse GGUFs at the published dimensions of big models: the real header, the data a hole.

Each file carries the header and tensor table a conversion with llama.cpp's `convert_hf_to_gguf.py`
(as vendored in llama-cpp-python 0.3.36) would write from the model's config.json, and no weight:
the data section is a hole, so the file's apparent size is the real model's and its disk use a
few hundred KiB. The planner and llama.cpp's dry run (no allocation) read only the header.

    python -m testkit.real_shapes OUTDIR         # writes FILES, prints their sizes
    python -m testkit.real_shapes --moe OUTDIR   # the MoE set (MOE_FILES) instead

Values are taken from each model's config.json (cited per model below); how each becomes a GGUF
key follows the converter (conversion/deepseek.py DeepseekV4Model / DeepseekV2Model, llama.py).
Where a file differs from a real conversion it is said at the shape, and none of it touches the
cache: DeepSeek-V4's three hash-routed layers (`num_hash_layers` 3) keep a learned router here
(hash_layer_count 0: the tid2eid tables are weights only), and the MTP block is left out as the
converter does for the main file (nextn is exported only with --mtp).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from testkit.gguf_models import BIG, ArchShape, write_deepseek4, write_shape_header_only

# Window only (0), CSA + lightning indexer (4), HCA (128), per layer.


def _v4_ratios(n_layer: int, first: int) -> tuple[int, ...]:
    """compress_ratios: the first two layers `first`, then 4 on even and 128 on odd layers."""
    return tuple(first if il < 2 else (4 if il % 2 == 0 else 128) for il in range(n_layer))


# deepseek-ai/DeepSeek-V4-Flash config.json: hidden_size 4096, num_hidden_layers 43,
# num_attention_heads 64, num_key_value_heads 1, head_dim 512, qk_rope_head_dim 64, q_lora_rank 1024,
# o_groups 8, o_lora_rank 1024, n_routed_experts 256, num_experts_per_tok 6, n_shared_experts 1,
# moe_intermediate_size 2048, vocab_size 129280, sliding_window 128, index_n_heads 64,
# index_head_dim 128, index_topk 512, hc_mult 4, compress_ratios [0, 0, 4, 128, 4, 128, ...],
# max_position_embeddings 1048576. Weights as the converter emits them: MXFP4 experts, Q8_0 else.
V4_FLASH: dict[str, Any] = {
    "n_layer": 43,
    "n_embd": 4096,
    "n_head": 64,
    "n_head_kv": 1,
    "head_dim": 512,
    "rope_dim": 64,
    "q_lora_rank": 1024,
    "o_groups": 8,
    "o_lora_rank": 1024,
    "n_expert": 256,
    "n_expert_used": 6,
    "n_expert_shared": 1,
    "n_ff_expert": 2048,
    "n_vocab": 129280,
    "n_ctx_train": 1048576,
    "sliding_window": 128,
    "compress_ratios": _v4_ratios(43, 0),
    "indexer_n_head": 64,
    "indexer_head_dim": 128,
    "indexer_top_k": 512,
    "name": "DeepSeek-V4-Flash (sparse, real dimensions)",
}

# deepseek-ai/DeepSeek-V4-Pro config.json: hidden_size 7168, num_hidden_layers 61,
# num_attention_heads 128, num_key_value_heads 1, head_dim 512, qk_rope_head_dim 64, q_lora_rank 1536,
# o_groups 16, o_lora_rank 1024, n_routed_experts 384, num_experts_per_tok 6, n_shared_experts 1,
# moe_intermediate_size 3072, vocab_size 129280, sliding_window 128, index_n_heads 64,
# index_head_dim 128, index_topk 1024, hc_mult 4, compress_ratios [128, 128, 4, 128, 4, ...]
# (layers 0-1 HCA, then CSA/HCA interleaved), max_position_embeddings 1048576.
V4_PRO: dict[str, Any] = {
    **V4_FLASH,
    "n_layer": 61,
    "n_embd": 7168,
    "n_head": 128,
    "q_lora_rank": 1536,
    "o_groups": 16,
    "n_expert": 384,
    "n_ff_expert": 3072,
    "compress_ratios": _v4_ratios(61, 128),
    "indexer_top_k": 1024,
    "name": "DeepSeek-V4-Pro (sparse, real dimensions)",
}

# deepseek-ai/DeepSeek-V3.2-Exp config.json (architecture `deepseek32` in the vendored llama.cpp):
# hidden_size 7168, num_hidden_layers 61, num_attention_heads 128, q_lora_rank 1536,
# kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, n_routed_experts 256,
# num_experts_per_tok 8, n_shared_experts 1, moe_intermediate_size 2048, intermediate_size 18432,
# first_k_dense_replace 3, vocab_size 129280, index_n_heads 64, index_head_dim 128,
# index_topk 2048, max_position_embeddings 163840. The converter writes key_length 576 (latent 512 +
# rope 64), value_length 512, key_length_mla 192, value_length_mla 128.
V32: dict[str, Any] = {
    "n_layer": 61,
    "n_embd": 7168,
    "n_head": 128,
    "n_head_kv": 1,
    "n_ff": 18432,
    "n_vocab": 129280,
    "n_ctx_train": 163840,
    "n_expert": 256,
    "n_expert_used": 8,
    "n_expert_shared": 1,
    "n_ff_expert": 2048,
    "n_dense_lead": 3,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "rope_dim": 64,
    "head_dim_k_mla": 192,
    "head_dim_v_mla": 128,
    "indexer_n_head": 64,
    "indexer_head_dim": 128,
    "indexer_top_k": 2048,
    "tied": False,
    "name": "DeepSeek-V3.2 (sparse, real dimensions)",
}

# meta-llama/Llama-3.1-405B config.json: hidden_size 16384, num_hidden_layers 126,
# num_attention_heads 128, num_key_value_heads 8, (head_dim 128), intermediate_size 53248,
# vocab_size 128256, rope_theta 500000, max_position_embeddings 131072; bf16 weights. Chosen as the
# GQA model because its cache is the "bf16 GQA" DeepSeek's V4 report compares with (8 KV heads of
# 128, bf16) and, at 405B, it sits between V4-Flash and V4-Pro (Qwen3-235B-A22B has 4 KV heads).
LLAMA_405B: dict[str, Any] = {
    "n_layer": 126,
    "n_embd": 16384,
    "n_head": 128,
    "n_head_kv": 8,
    "n_ff": 53248,
    "n_vocab": 128256,
    "n_ctx_train": 131072,
    "rope_freq_base": 500000.0,
    "tied": False,
    "name": "Llama-3.1-405B (sparse, real dimensions)",
}

# Released mixture-of-experts models in their usual quantizations, for expert placement
# (bench/planner.py's MoE table). Q4_K_M is testkit's llama-quantize recipe (gguf_models
# _q4_k_m_type); llama-quantize's MoE special cases (8-expert attn_v/attn_k at Q8_0) are not applied.

# Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, num_hidden_layers 48, num_attention_heads 32,
# num_key_value_heads 4, head_dim 128, intermediate_size 6144, moe_intermediate_size 768,
# num_experts 128, num_experts_per_tok 8, vocab_size 151936, max_position_embeddings 40960,
# rope_theta 1000000, tie_word_embeddings false.
QWEN3_30B_A3B = ArchShape(
    arch="qwen3moe",
    name="Qwen3-30B-A3B (sparse, real dimensions)",
    n_layer=48,
    n_embd=2048,
    n_head=32,
    n_head_kv=4,
    head_dim=128,
    n_ff=6144,
    n_vocab=151936,
    n_ctx_train=40960,
    rope_freq_base=1e6,
    n_expert=128,
    n_expert_used=8,
    n_ff_expert=768,
    tied=False,
)

# openai/gpt-oss-120b config.json: as gpt-oss-20b (hidden_size 2880, 64 heads of 64, 8 KV heads,
# intermediate_size 2880, vocab 201088, sliding_window 128, rope_theta 150000) with
# num_hidden_layers 36 and num_local_experts 128 (experts_per_token 4); gpt-oss-20b has 24 layers
# and 32 experts (testkit.gguf_models.BIG). Released as MXFP4 experts, the rest 8-bit here.
GPT_OSS_120B = replace(BIG["gpt-oss-20b"], name="gpt-oss-120b (sparse, real dimensions)", n_layer=36, n_expert=128)

# zai-org/GLM-4.5-Air config.json: hidden_size 4096, num_hidden_layers 46, num_attention_heads 96,
# num_key_value_heads 8, head_dim 128, partial_rotary_factor 0.5, attention_bias true,
# use_qk_norm false, intermediate_size 10944, moe_intermediate_size 1408, n_routed_experts 128,
# num_experts_per_tok 8, n_shared_experts 1, first_k_dense_replace 1, num_nextn_predict_layers 1,
# vocab_size 151552, max_position_embeddings 131072, rope_theta 1000000. The converter
# (conversion/glm.py Glm4MoeModel) counts the MTP block in block_count (47); its nextn tensors
# here are eh_proj and the three norms (no separate embed_tokens / shared_head.head).
GLM_45_AIR = ArchShape(
    arch="glm4moe",
    name="GLM-4.5-Air (sparse, real dimensions)",
    n_layer=47,
    n_layer_nextn=1,
    n_embd=4096,
    n_head=96,
    n_head_kv=8,
    head_dim=128,
    rope_dim=64,
    n_ff=10944,
    n_vocab=151552,
    n_ctx_train=131072,
    rope_freq_base=1e6,
    n_expert=128,
    n_expert_used=8,
    n_ff_expert=1408,
    n_expert_shared=1,
    n_dense_lead=1,
    tied=False,
)

# mistralai/Mixtral-8x7B-Instruct-v0.1 config.json: hidden_size 4096, num_hidden_layers 32,
# num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336, num_local_experts 8,
# num_experts_per_tok 2, vocab_size 32000, max_position_embeddings 32768, rope_theta 1000000.
# Converted as architecture `llama` with merged expert tensors (ffn_*_exps of n_ff rows).
MIXTRAL_8X7B = ArchShape(
    arch="llama",
    name="Mixtral-8x7B-Instruct-v0.1 (sparse, real dimensions)",
    n_layer=32,
    n_embd=4096,
    n_head=32,
    n_head_kv=8,
    n_ff=14336,
    n_vocab=32000,
    n_ctx_train=32768,
    rope_freq_base=1e6,
    n_expert=8,
    n_expert_used=2,
    n_ff_expert=14336,
    tied=False,
)

# key: (shape, testkit quantization recipe)
MOE_SHAPES: dict[str, tuple[ArchShape, str]] = {
    "qwen3-30b-a3b": (QWEN3_30B_A3B, "Q4_K_M"),
    "gpt-oss-20b": (BIG["gpt-oss-20b"], "MXFP4"),
    "gpt-oss-120b": (GPT_OSS_120B, "MXFP4"),
    "glm-4.5-air": (GLM_45_AIR, "Q4_K_M"),
    "mixtral-8x7b": (MIXTRAL_8X7B, "Q4_K_M"),
}


FILES = {
    "qwen3-30b-a3b": "Qwen3-30B-A3B-Q4_K_M.sparse.gguf",
    "v4-flash": "DeepSeek-V4-Flash.sparse.gguf",
    "v4-pro": "DeepSeek-V4-Pro.sparse.gguf",
    "v3.2": "DeepSeek-V3.2.sparse.gguf",
    "llama-405b": "Llama-3.1-405B-bf16.sparse.gguf",
}

# The MoE set: the shapes above and DeepSeek-V4-Flash (MXFP4 experts, Q8_0 else).
MOE_FILES = {
    "qwen3-30b-a3b": "Qwen3-30B-A3B-Q4_K_M.sparse.gguf",
    "gpt-oss-20b": "gpt-oss-20b-MXFP4.sparse.gguf",
    "gpt-oss-120b": "gpt-oss-120b-MXFP4.sparse.gguf",
    "glm-4.5-air": "GLM-4.5-Air-Q4_K_M.sparse.gguf",
    "mixtral-8x7b": "Mixtral-8x7B-Q4_K_M.sparse.gguf",
    "v4-flash": FILES["v4-flash"],
}


def write_real(key: str, out_dir: str | os.PathLike[str]) -> Path:
    """Write one of FILES or MOE_FILES into `out_dir` (sparse) and return its path."""
    path = Path(out_dir) / (FILES.get(key) or MOE_FILES[key])
    if key in MOE_SHAPES:
        moe_shape, recipe = MOE_SHAPES[key]
        return write_shape_header_only(path, moe_shape, recipe=recipe)
    if key in ("v4-flash", "v4-pro"):
        shape = V4_FLASH if key == "v4-flash" else V4_PRO
        return write_deepseek4(path, weight_type="q8_0", expert_type="mxfp4", sparse=True, **shape)
    if key == "v3.2":
        return write_shape_header_only(path, ArchShape(arch="deepseek32", **V32), recipe="Q8_0")
    if key == "llama-405b":
        return write_shape_header_only(path, ArchShape(arch="llama", **LLAMA_405B), recipe="BF16")
    raise KeyError(key)


def write_all(out_dir: str | os.PathLike[str], keys: Iterable[str] = tuple(FILES)) -> dict[str, Path]:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return {key: write_real(key, out_dir) for key in keys}


def disk_bytes(path: Path) -> int:
    """Bytes the file occupies on disk (st_blocks are 512-byte units on Linux and macOS)."""
    return path.stat().st_blocks * 512


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    moe = args[:1] == ["--moe"]
    args = args[1:] if moe else args
    if len(args) != 1:
        print("usage: python -m testkit.real_shapes [--moe] OUTDIR", file=sys.stderr)
        return 2
    for path in write_all(args[0], tuple(MOE_FILES) if moe else tuple(FILES)).values():
        apparent = path.stat().st_size
        print(f"{path}  apparent {apparent / 2**30:,.1f} GiB  on disk {disk_bytes(path) / 2**10:,.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
