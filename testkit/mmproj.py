"""Small but real vision projector (mmproj) files, written with the `gguf` package.

A projector is a CLIP-style vision encoder plus the projection into the language model's
embedding space; llama.cpp's tools/mtmd/clip.cpp loads it. The tensor names and keys follow
clip.cpp's loader (load_hparams, load_tensors) for two projector types:

- "mlp": LLaVA-1.5's, a ViT with a class token and a two-layer MLP (mm.0, mm.2); one token per
  patch, so (image_size / patch_size)^2 tokens per image;
- "gemma3": Gemma 3's, a SigLIP ViT, then an average pool by `n_merge` per side, a soft-embedding
  norm and an input projection; (image_size / patch_size / n_merge)^2 tokens per image.

Random weights: the files are for memory counts and for checking that a request with an image is
accepted, not for sensible answers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

PROJECTOR_KINDS = ("mlp", "gemma3")


@dataclass(frozen=True)
class ProjectorShape:
    kind: str = "mlp"
    n_embd_text: int = 128  # the language model's n_embd the projector outputs
    n_embd: int = 64  # the vision encoder's width
    n_ff: int = 128
    n_layer: int = 2
    n_head: int = 4
    image_size: int = 112
    patch_size: int = 14
    n_merge: int = 2  # gemma3: the average pool's factor per side


def write_projector(
    path: str | os.PathLike[str],
    kind: str = "mlp",
    *,
    weight_type: str = "f16",
    seed: int = 0,
    **overrides: int,
) -> Path:
    """Write a tiny `kind` projector (see PROJECTOR_KINDS) that llama.cpp's clip.cpp loads."""
    if kind not in PROJECTOR_KINDS:
        raise ValueError(f"unknown projector kind {kind!r}; known: {', '.join(PROJECTOR_KINDS)}")
    s = ProjectorShape(kind=kind, **overrides)
    p = Path(path)
    w = GGUFWriter(str(p), "clip")
    w.add_string("general.name", f"tiny-{kind}-projector")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", kind)
    w.add_uint32("clip.vision.embedding_length", s.n_embd)
    w.add_uint32("clip.vision.feed_forward_length", s.n_ff)
    w.add_uint32("clip.vision.block_count", s.n_layer)
    w.add_uint32("clip.vision.attention.head_count", s.n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.image_size", s.image_size)
    w.add_uint32("clip.vision.patch_size", s.patch_size)
    w.add_uint32("clip.vision.projection_dim", s.n_embd_text)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_bool("clip.use_gelu", True)
    if kind == "gemma3":
        w.add_uint32("clip.vision.projector.scale_factor", s.n_merge)

    rng = np.random.default_rng(seed)
    wtype = GGMLQuantizationType[weight_type.upper()]

    def add(name: str, ne: tuple[int, ...], matmul: bool = False) -> None:
        # ggml order (ne[0] first) in, numpy order out; matmul weights take the weight type.
        dtype = np.float16 if matmul and wtype == GGMLQuantizationType.F16 else np.float32
        data = (rng.standard_normal(tuple(reversed(ne))) * 0.02).astype(dtype)
        w.add_tensor(name, data)

    e, n_patches = s.n_embd, (s.image_size // s.patch_size) ** 2
    add("v.patch_embd.weight", (s.patch_size, s.patch_size, 3, e), matmul=True)
    add("v.patch_embd.bias", (e,))
    n_pos = n_patches + (1 if kind == "mlp" else 0)
    if kind == "mlp":
        add("v.class_embd", (e,))
        add("v.pre_ln.weight", (e,))
        add("v.pre_ln.bias", (e,))
    add("v.position_embd.weight", (e, n_pos))
    for il in range(s.n_layer):
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add(f"v.blk.{il}.{t}.weight", (e, e), matmul=True)
            add(f"v.blk.{il}.{t}.bias", (e,))
        for ln in ("ln1", "ln2"):
            add(f"v.blk.{il}.{ln}.weight", (e,))
            add(f"v.blk.{il}.{ln}.bias", (e,))
        add(f"v.blk.{il}.ffn_up.weight", (e, s.n_ff), matmul=True)
        add(f"v.blk.{il}.ffn_up.bias", (s.n_ff,))
        add(f"v.blk.{il}.ffn_down.weight", (s.n_ff, e), matmul=True)
        add(f"v.blk.{il}.ffn_down.bias", (e,))
    if kind == "mlp":
        add("mm.0.weight", (e, s.n_embd_text), matmul=True)
        add("mm.0.bias", (s.n_embd_text,))
        add("mm.2.weight", (s.n_embd_text, s.n_embd_text), matmul=True)
        add("mm.2.bias", (s.n_embd_text,))
    else:
        add("v.post_ln.weight", (e,))
        add("v.post_ln.bias", (e,))
        add("mm.soft_emb_norm.weight", (e,))
        # clip.cpp reads the output width from ne[0] of this one (it is applied transposed).
        add("mm.input_projection.weight", (s.n_embd_text, e), matmul=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return p
