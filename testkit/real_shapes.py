"""Sparse GGUFs at the published dimensions of big models: the real header, the data a hole.

Each file carries the header and tensor table a conversion with llama.cpp's `convert_hf_to_gguf.py`
(as vendored in llama-cpp-python 0.3.36) would write from the model's config.json, and no weight:
the data section is a hole, so the file's apparent size is the real model's and its disk use a
few hundred KiB. The planner and llama.cpp's dry run (no allocation) read only the header.

    python -m testkit.real_shapes OUTDIR     # writes the files, prints their sizes

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
from pathlib import Path
from typing import Any

from testkit.gguf_models import ArchShape, write_deepseek4, write_shape_header_only

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


# Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, num_hidden_layers 48, num_attention_heads 32,
# num_key_value_heads 4, head_dim 128, num_experts 128, num_experts_per_tok 8,
# moe_intermediate_size 768, vocab_size 151936, max_position_embeddings 40960, rope_theta 1000000,
# tie_word_embeddings false. The MoE shape the planner's expert placement is tried on (#39): 48
# layers of 128 routed experts (about 0.36 GiB of them per layer at Q4_K_M) and a small attention.
QWEN3_30B_A3B: dict[str, Any] = {
    "n_layer": 48,
    "n_embd": 2048,
    "n_head": 32,
    "n_head_kv": 4,
    "head_dim": 128,
    "n_ff": 6144,
    "n_vocab": 151936,
    "n_ctx_train": 40960,
    "n_expert": 128,
    "n_expert_used": 8,
    "n_ff_expert": 768,
    "rope_freq_base": 1e6,
    "tied": False,
    "name": "Qwen3-30B-A3B (sparse, real dimensions)",
}


FILES = {
    "qwen3-30b-a3b": "Qwen3-30B-A3B-Q4_K_M.sparse.gguf",
    "v4-flash": "DeepSeek-V4-Flash.sparse.gguf",
    "v4-pro": "DeepSeek-V4-Pro.sparse.gguf",
    "v3.2": "DeepSeek-V3.2.sparse.gguf",
    "llama-405b": "Llama-3.1-405B-bf16.sparse.gguf",
}


def write_real(key: str, out_dir: str | os.PathLike[str]) -> Path:
    """Write one of FILES into `out_dir` (sparse) and return its path."""
    path = Path(out_dir) / FILES[key]
    if key in ("v4-flash", "v4-pro"):
        shape = V4_FLASH if key == "v4-flash" else V4_PRO
        return write_deepseek4(path, weight_type="q8_0", expert_type="mxfp4", sparse=True, **shape)
    if key == "v3.2":
        return write_shape_header_only(path, ArchShape(arch="deepseek32", **V32), recipe="Q8_0")
    if key == "qwen3-30b-a3b":
        return write_shape_header_only(path, ArchShape(arch="qwen3moe", **QWEN3_30B_A3B), recipe="Q4_K_M")
    if key == "llama-405b":
        return write_shape_header_only(path, ArchShape(arch="llama", **LLAMA_405B), recipe="BF16")
    raise KeyError(key)


def write_all(out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return {key: write_real(key, out_dir) for key in FILES}


def disk_bytes(path: Path) -> int:
    """Bytes the file occupies on disk (st_blocks are 512-byte units on Linux and macOS)."""
    return path.stat().st_blocks * 512


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m testkit.real_shapes OUTDIR", file=sys.stderr)
        return 2
    for path in write_all(args[0]).values():
        apparent = path.stat().st_size
        print(f"{path}  apparent {apparent / 2**30:,.1f} GiB  on disk {disk_bytes(path) / 2**10:,.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
