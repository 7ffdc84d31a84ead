"""Llama-family forward pass in torch, with weights read straight from a GGUF file.

The attention step is delegated to a cache object (vrampilot.hybrid.cache), so the same model runs the
full cache, the plain sliding window and the hybrid cache; everything else (norms, projections,
RoPE, MLP) follows llama.cpp's `llm_build_llama` so that, with the full cache, greedy continuations
match llama.cpp on the same file.

Two llama.cpp conventions matter:
- convert_hf_to_gguf.py permutes the rows of Q and K per head from HF's "two halves" layout into
  interleaved pairs, because llama.cpp's NORM RoPE (LLAMA_ROPE_TYPE_NORM, used by the llama
  architecture) rotates adjacent pairs (x[2i], x[2i+1]). Instead of undoing the permutation we apply
  the adjacent-pair rotation to the stored weights, which is the same function (see `Rope`).
- The KV cache holds f16 keys and values; the caches here store f16 too, so the comparison with
  llama.cpp and the byte counts both describe the same thing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from vrampilot.errors import UserError
from vrampilot.gguf import GGUFFile, ModelSpec, TensorInfo, load_model_spec, read_gguf
from vrampilot.hybrid.config import CacheShape


class AttentionCache(Protocol):
    """What the forward pass needs of a KV cache (vrampilot.hybrid.cache implements it): attention for
    one layer's new queries, and the longest chunk the cache accepts at once."""

    @property
    def max_chunk(self) -> int | None: ...

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int) -> torch.Tensor: ...


# Architectures whose graph is exactly "RMSNorm, Q/K/V without bias, NORM RoPE, SwiGLU MLP".
SUPPORTED_ARCHITECTURES = frozenset({"llama"})


class HybridModelError(UserError):
    """A model file this backend cannot run; the message says why."""


@dataclass(frozen=True)
class ModelConfig:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_rot: int
    rope_base: float
    rms_eps: float
    n_ctx_train: int
    tied_embeddings: bool
    bos_token_id: int | None
    eos_token_id: int | None

    @property
    def n_group(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.n_head // self.n_head_kv

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """What identifies a model for calibrated settings (HybridConfig.retrieval_model)."""
        return (self.n_layer, self.n_head, self.n_head_kv, self.head_dim, self.n_vocab)

    @property
    def cache_shape(self) -> CacheShape:
        """What byte counts need of this model (hybrid.layer_plan.config_kv_bytes)."""
        return CacheShape(self.n_layer, self.n_head_kv, self.head_dim, self.shape)

    @property
    def f16_kv_bytes_per_token(self) -> int:
        """What llama.cpp's default f16 cache stores per token: K and V, every layer."""
        return self.cache_shape.f16_kv_bytes_per_token


def config_from_spec(spec: ModelSpec, gg: GGUFFile) -> ModelConfig:
    arch = spec.architecture
    if arch not in SUPPORTED_ARCHITECTURES:
        raise HybridModelError(
            f"{spec.path.name}: architecture {arch!r} is not supported by the hybrid backend (only Llama-family)"
        )
    if len(set(spec.n_head)) != 1 or len(set(spec.n_head_kv)) != 1 or len(set(spec.n_ff)) != 1:
        raise HybridModelError(
            f"{spec.path.name}: per-layer head counts differ; the hybrid backend needs uniform layers"
        )
    if spec.head_dim_k != spec.head_dim_v:
        raise HybridModelError(f"{spec.path.name}: key and value head sizes differ")
    if spec.rope_scaling_type not in (None, "none"):
        raise HybridModelError(f"{spec.path.name}: RoPE scaling {spec.rope_scaling_type!r} is not supported")
    eps = gg.get(f"{arch}.attention.layer_norm_rms_epsilon")
    bos = gg.get("tokenizer.ggml.bos_token_id")
    eos = gg.get("tokenizer.ggml.eos_token_id")
    return ModelConfig(
        n_layer=spec.n_layer,
        n_embd=spec.n_embd,
        n_head=spec.n_head[0],
        n_head_kv=spec.n_head_kv[0],
        head_dim=spec.head_dim_k,
        n_ff=spec.n_ff[0],
        n_vocab=spec.n_vocab,
        n_rot=spec.n_rot,
        rope_base=spec.rope_freq_base if spec.rope_freq_base is not None else 10000.0,
        rms_eps=float(eps) if eps is not None else 1e-5,
        n_ctx_train=spec.n_ctx_train,
        tied_embeddings=spec.tied_embeddings,
        bos_token_id=int(bos) if bos is not None else None,
        eos_token_id=int(eos) if eos is not None else None,
    )


def read_tensor(path: Path, info: TensorInfo) -> np.ndarray:
    """Dequantize one tensor to float32, shaped (rows, row_length) like torch's Linear weight.

    ggml's shape lists the row length first; numpy's is the reverse.
    """
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=info.offset_bytes, shape=(info.n_bytes,))
    qtype = GGMLQuantizationType(info.ggml_type)
    shape = tuple(reversed(info.shape))
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        out = dequantize(np.asarray(raw), qtype)
    else:
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        out = dequantize(np.asarray(raw).reshape(rows, -1), qtype)
    return np.array(out.reshape(shape), dtype=np.float32, copy=True)  # writable: torch wants to own it


class Rope:
    """llama.cpp's NORM rotary embedding: adjacent pairs (x[2i], x[2i+1]) turn by pos * base^(-2i/n_rot).

    Applied to Q/K as GGUF stores them (pairs interleaved), it equals HF's rotate-half RoPE applied
    to the un-permuted weights. Only the first n_rot dimensions rotate.
    """

    def __init__(self, head_dim: int, n_rot: int, base: float) -> None:
        if n_rot % 2 or n_rot > head_dim:
            raise ValueError(f"n_rot {n_rot} must be even and at most head_dim {head_dim}")
        self.head_dim = head_dim
        self.n_rot = n_rot
        # float64 for the angles: at position 8191 float32 loses the last bits of theta.
        self.inv_freq = base ** (-torch.arange(0, n_rot, 2, dtype=torch.float64) / n_rot)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        return torch.cos(theta).float(), torch.sin(theta).float()

    def apply(self, x: torch.Tensor, positions: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
        """Rotate x of shape (..., n, head_dim) at the given n positions (inverse: rotate back)."""
        return self.apply_cs(x, self.cos_sin(positions), inverse=inverse)

    def apply_cs(
        self, x: torch.Tensor, cs: tuple[torch.Tensor, torch.Tensor], *, inverse: bool = False
    ) -> torch.Tensor:
        """`apply` with cos/sin computed once by the caller (the forward pass shares them over layers)."""
        cos, sin = cs
        if inverse:
            sin = -sin
        rot = x[..., : self.n_rot].unflatten(-1, (self.n_rot // 2, 2))
        x0, x1 = rot[..., 0], rot[..., 1]
        out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
        if self.n_rot == self.head_dim:
            return out
        return torch.cat((out, x[..., self.n_rot :]), dim=-1)


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    w_qkv: torch.Tensor  # Q, K and V rows stacked: one matmul instead of three
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate_up: torch.Tensor  # gate and up rows stacked
    w_down: torch.Tensor


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else max(1, os.cpu_count() or 1)


class LlamaModel:
    """The weights of one GGUF file as float32 torch tensors, and the forward pass over them."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        gg = read_gguf(self.path)
        spec = load_model_spec(self.path)
        if spec.split_paths:
            raise HybridModelError(f"{self.path.name}: split models are not supported by the hybrid backend")
        self.config = config_from_spec(spec, gg)
        self.spec = spec
        by_name = {t.name: t for t in gg.tensors}

        def get(name: str) -> torch.Tensor:
            info = by_name.get(name)
            if info is None:
                raise HybridModelError(f"{self.path.name}: tensor {name} is missing")
            return torch.from_numpy(read_tensor(self.path, info))

        self.tok_embd = get("token_embd.weight")
        self.output_norm = get("output_norm.weight")
        self.output = self.tok_embd if self.config.tied_embeddings else get("output.weight")
        self.layers = [
            _Layer(
                attn_norm=get(f"blk.{i}.attn_norm.weight"),
                w_qkv=torch.cat([get(f"blk.{i}.attn_{x}.weight") for x in "qkv"]),
                wo=get(f"blk.{i}.attn_output.weight"),
                ffn_norm=get(f"blk.{i}.ffn_norm.weight"),
                w_gate_up=torch.cat((get(f"blk.{i}.ffn_gate.weight"), get(f"blk.{i}.ffn_up.weight"))),
                w_down=get(f"blk.{i}.ffn_down.weight"),
            )
            for i in range(self.config.n_layer)
        ]
        c = self.config
        self.rope = Rope(c.head_dim, c.n_rot, c.rope_base)

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.config.rms_eps)

    @torch.inference_mode()
    def forward_hidden(self, tokens: torch.Tensor, pos0: int, cache: AttentionCache) -> torch.Tensor:
        """Run n new tokens at positions pos0.. through every layer; returns the final-normed hidden (n, n_embd).

        The cache sees each layer's rotated Q/K and V and returns the attention output, so what it
        keeps and how it reads decides everything about memory.
        """
        c = self.config
        n = tokens.shape[0]
        cs = self.rope.cos_sin(torch.arange(pos0, pos0 + n))
        n_q, n_kv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        x = self.tok_embd[tokens]
        for il, layer in enumerate(self.layers):
            qkv = self._rms_norm(x, layer.attn_norm) @ layer.w_qkv.T
            q = qkv[:, :n_q].view(n, c.n_head, c.head_dim).transpose(0, 1)
            k = qkv[:, n_q : n_q + n_kv].view(n, c.n_head_kv, c.head_dim).transpose(0, 1)
            v = qkv[:, n_q + n_kv :].reshape(n, c.n_head_kv, c.head_dim).transpose(0, 1)
            o = cache.attend(il, self.rope.apply_cs(q, cs), self.rope.apply_cs(k, cs), v, pos0)  # (n_head, n, d)
            x = x + o.transpose(0, 1).reshape(n, n_q) @ layer.wo.T
            gate, up = (self._rms_norm(x, layer.ffn_norm) @ layer.w_gate_up.T).split(c.n_ff, dim=-1)
            x = x + (F.silu(gate) * up) @ layer.w_down.T
        return self._rms_norm(x, self.output_norm)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.output.T

    @torch.inference_mode()
    def forward(
        self, tokens: torch.Tensor, pos0: int, cache: AttentionCache, *, all_logits: bool = False
    ) -> torch.Tensor:
        """Logits of the last token (n_vocab,), or of every token (n, n_vocab) with all_logits."""
        hidden = self.forward_hidden(tokens, pos0, cache)
        return self.logits(hidden if all_logits else hidden[-1])
