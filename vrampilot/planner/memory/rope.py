"""A context longer than the model was trained for, run the same way in llama-server and in the app.

llama-server caps every slot at the model's trained context (tools/server/server-context.cpp,
n_ctx_slot: min(llama_n_ctx_seq, llama_model_n_ctx_train)) while still allocating the whole -c,
and llama-cpp-python does not cap at all: without more, a 16K plan of an 8K model chatted at 16K in
the app, served 8K through llama-server and wasted the other half of its cache there.

The trained context llama.cpp compares with is not fixed: creating a context with YaRN RoPE scaling
and a frequency scale other than the model's re-adjusts it to n_ctx_orig_yarn / rope_freq_scale
(src/llama-context.cpp, llama_init_from_model). So a plan whose slot is longer than the trained
context carries YaRN scaling by the ratio (--rope-scaling yarn --rope-scale R --yarn-orig-ctx N):
llama-server then serves the whole slot, and the app's engine passes the same three values, so both
compute the same positions. Memory is unchanged (RoPE scaling moves no tensor).

A model whose file already carries a RoPE scaling that is not YaRN (linear, longrope) is not
rescaled: switching its method would change how it was fine-tuned to read positions; its context
is capped at the trained one instead (cap_ctx), as llama-server would serve it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory.kv import effective_ctx, kv_unified
from vrampilot.planner.settings import Settings

# How finely the scale is written (--rope-scale takes a decimal; three places keep the line short).
_SCALE_STEP = 1000


def extends_by_yarn(spec: ModelSpec) -> bool:
    """Whether a context past the trained one is reached by YaRN (the file has no other scaling)."""
    kind = (spec.rope_scaling_type or "none").lower()
    return kind in ("none", "yarn") and spec.n_ctx_train > 0


def cap_ctx(spec: ModelSpec, n_ctx: int) -> int:
    """The context a plan can serve: the trained one at most where YaRN cannot lift it."""
    if extends_by_yarn(spec) or spec.n_ctx_train <= 0:
        return n_ctx
    return min(n_ctx, spec.n_ctx_train)


def slot_ctx(spec: ModelSpec, settings: Settings) -> int:
    """One sequence's context as llama.cpp computes it (llama_n_ctx_seq): the padded n_ctx, divided
    among the sequences unless one cache serves them all."""
    n_ctx = effective_ctx(spec, settings)
    return n_ctx if kv_unified(settings) else n_ctx // max(1, settings.n_seq)


def _orig_ctx(spec: ModelSpec) -> int:
    # llama.cpp's n_ctx_orig_yarn: the file's original length when it has one, else the trained.
    return spec.rope_original_ctx or spec.n_ctx_train


def _trained_after(orig: int, scale: float) -> int:
    """llama.cpp's re-adjusted trained context for --rope-scale `scale`, in its float32 arithmetic
    (arg.cpp: rope_freq_scale = 1.0f / stof(value); the context truncates orig / freq_scale)."""
    freq = np.float32(1.0) / np.float32(scale)
    return int(np.float32(orig) / freq)


def with_context_extension(spec: ModelSpec, settings: Settings) -> Settings:
    """`settings` with the YaRN scaling that lets llama-server serve its whole slot, or without any
    when the slot is within the trained context."""
    plain = replace(settings, rope_scale=0.0, yarn_orig_ctx=0)
    slot = slot_ctx(spec, settings)
    if not extends_by_yarn(spec) or slot <= spec.n_ctx_train:
        return plain
    orig = _orig_ctx(spec)
    scale = math.ceil(slot / orig * _SCALE_STEP) / _SCALE_STEP
    while _trained_after(orig, scale) < slot:
        scale = round(scale + 1 / _SCALE_STEP, 3)
    return replace(settings, rope_scale=scale, yarn_orig_ctx=orig)


def yarn_freq_scale(rope_scale: float) -> float:
    """The frequency scale llama-server derives from --rope-scale, for llama-cpp-python's keyword."""
    return float(np.float32(1.0) / np.float32(rope_scale))
