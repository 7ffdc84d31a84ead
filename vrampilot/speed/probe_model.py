"""A tiny Llama GGUF for the speed probe: weights too small to cost anything, so decoding it times
what every decode step costs besides its weights and attention (llama.cpp's graph, its threads'
barriers at every node, the logits, the engine's loop and sampling).

Written with the `gguf` package into a temporary folder; never shipped and never shown. The
vocabulary is llama.cpp's "none" type with `llama.vocab_size` placeholder tokens, which loads and
decodes like any other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter

# Small enough that a layer's weights (about 20 KB) and attention cost well under a microsecond.
N_EMBD, N_HEAD, N_FF = 32, 2, 64


def write_probe_model(path: Path, n_layer: int, n_vocab: int) -> Path:
    a = "llama"
    w = GGUFWriter(path, a)
    u32, f32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
    for key, value, vtype in (
        (f"{a}.context_length", 4096, u32),
        (f"{a}.embedding_length", N_EMBD, u32),
        (f"{a}.block_count", n_layer, u32),
        (f"{a}.feed_forward_length", N_FF, u32),
        (f"{a}.attention.head_count", N_HEAD, u32),
        (f"{a}.attention.head_count_kv", N_HEAD, u32),
        (f"{a}.attention.layer_norm_rms_epsilon", 1e-6, f32),
        (f"{a}.vocab_size", n_vocab, u32),
        ("tokenizer.ggml.model", "none", GGUFValueType.STRING),
    ):
        w.add_key_value(key, value, vtype)
    rng = np.random.default_rng(0)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)  # numpy order: (ne1, ne0)

    w.add_tensor("token_embd.weight", mat(n_vocab, N_EMBD))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for il in range(n_layer):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + name + ".weight", mat(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", mat(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", mat(N_EMBD, N_FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
