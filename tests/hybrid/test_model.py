"""The torch forward pass against an independent HF-layout reference and against llama.cpp."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    import llama_cpp
    import torch
else:
    torch = pytest.importorskip("torch")

from vrampilot.hybrid.cache import full_cache
from vrampilot.hybrid.model import LlamaModel, Rope

from .conftest import TinyLlama


def _hf_forward(t: TinyLlama, tokens: list[int]) -> torch.Tensor:
    """HF transformers' Llama math on the original (unpermuted) rows: rotate-half RoPE, GQA by
    repeat_interleave. K and V pass through f16 like llama.cpp's cache."""
    hf = {k: torch.from_numpy(v) for k, v in t.hf.items()}
    n, hd = len(tokens), t.head_dim
    pos = torch.arange(n, dtype=torch.float64)
    inv = t.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos[:, None] * inv[None]
    cos = torch.cat((ang.cos(), ang.cos()), -1).float()
    sin = torch.cat((ang.sin(), ang.sin()), -1).float()

    def rope(x: torch.Tensor) -> torch.Tensor:
        half = torch.cat((-x[..., hd // 2 :], x[..., : hd // 2]), -1)
        return x * cos + half * sin

    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + t.eps) * w

    x = hf["embed"][torch.tensor(tokens)]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(t.n_layer):
        h = norm(x, hf[f"{i}.attn_norm"])
        q = rope((h @ hf[f"{i}.q"].T).view(n, t.n_head, hd).transpose(0, 1))
        k = rope((h @ hf[f"{i}.k"].T).view(n, t.n_head_kv, hd).transpose(0, 1)).half().float()
        v = (h @ hf[f"{i}.v"].T).view(n, t.n_head_kv, hd).transpose(0, 1).half().float()
        g = t.n_head // t.n_head_kv
        k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
        att = (q @ k.transpose(-1, -2)) / hd**0.5
        o = torch.softmax(att.masked_fill(~mask, float("-inf")), -1) @ v
        x = x + o.transpose(0, 1).reshape(n, -1) @ hf[f"{i}.o"].T
        h = norm(x, hf[f"{i}.ffn_norm"])
        x = x + (torch.nn.functional.silu(h @ hf[f"{i}.gate"].T) * (h @ hf[f"{i}.up"].T)) @ hf[f"{i}.down"].T
    return norm(x, hf["norm"]) @ hf["embed"].T


def test_forward_matches_hf_layout_reference(tiny_llama: TinyLlama) -> None:
    model = LlamaModel(tiny_llama.path)
    assert model.config.tied_embeddings and model.config.n_group == 2
    tokens = [int(x) for x in np.random.default_rng(1).integers(0, tiny_llama.n_vocab, 40)]
    ours = model.forward(torch.tensor(tokens), 0, full_cache(model.config), all_logits=True)
    ref = _hf_forward(tiny_llama, tokens)
    assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-4), (ours - ref).abs().max()


def test_chunked_prefill_equals_one_pass(tiny_llama: TinyLlama) -> None:
    model = LlamaModel(tiny_llama.path)
    tokens = torch.tensor(np.random.default_rng(2).integers(0, tiny_llama.n_vocab, 33))
    one = model.forward(tokens, 0, full_cache(model.config), all_logits=True)
    cache = full_cache(model.config)
    parts = [model.forward(tokens[s : s + 5], s, cache, all_logits=True) for s in range(0, 33, 5)]
    assert torch.allclose(torch.cat(parts), one, atol=1e-4)


def test_rope_inverse_and_relative_position() -> None:
    rope = Rope(16, 16, 10000.0)
    x = torch.randn(2, 5, 16)
    pos = torch.arange(3, 8)
    assert torch.allclose(rope.apply(rope.apply(x, pos), pos, inverse=True), x, atol=1e-5)
    q, k = torch.randn(16), torch.randn(16)
    # q.k after rotation depends only on the distance: the property RoPE exists for.
    a = rope.apply(q[None], torch.tensor([10])) @ rope.apply(k[None], torch.tensor([4])).T
    b = rope.apply(q[None], torch.tensor([106])) @ rope.apply(k[None], torch.tensor([100])).T
    assert torch.allclose(a, b, atol=1e-4)


def _llama_cpp(path: Path) -> llama_cpp.Llama:
    lib = pytest.importorskip("llama_cpp")
    llm: llama_cpp.Llama = lib.Llama(str(path), n_ctx=256, n_threads=2, logits_all=True, verbose=False, seed=0)
    return llm


def _greedy_ours(model: LlamaModel, prompt: list[int], n: int) -> list[int]:
    cache = full_cache(model.config)
    logits = model.forward(torch.tensor(prompt), 0, cache)
    out: list[int] = []
    for i in range(n):
        out.append(int(logits.argmax()))
        logits = model.forward(torch.tensor(out[-1:]), len(prompt) + i, cache)
    return out


def _greedy_llama_cpp(llm: llama_cpp.Llama, prompt: list[int], n: int) -> list[int]:
    llm.reset()
    out: list[int] = []
    for tok in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
        out.append(int(tok))
        if len(out) == n:
            break
    return out


# Prompts whose 32-token greedy continuation was identical in llama.cpp and here on the machine
# they were picked on. On others the two part early at a near-tie (llama.cpp rounds activations to
# 8 bits before each quantized matmul), so those are held to teacher-forced agreement instead.
PROMPTS_EXACT = [
    "The history of the city of Rome begins",
    "The three primary colors are",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
]
PROMPTS_NEAR_TIE = [
    "Water boils at a temperature of",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village",
    "The largest planet in the solar system is",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
]


def test_greedy_matches_llama_cpp_short(embedded_model: Path) -> None:
    llm = _llama_cpp(embedded_model)
    model = LlamaModel(embedded_model)
    prompt = llm.tokenize(PROMPTS_EXACT[0].encode(), add_bos=False, special=True)
    assert _greedy_ours(model, prompt, 8) == _greedy_llama_cpp(llm, prompt, 8)


# Two implementations round differently (llama.cpp's 8-bit activations differ per instruction set),
# so where llama.cpp's own top two logits are this close the greedy paths may part. Exact equality
# over 32 tokens held on one CPU and not on another; what must hold everywhere is this.
NEAR_TIE_LOGITS = 1.0


@pytest.mark.slow
def test_greedy_follows_llama_cpp_32_tokens_up_to_a_near_tie(embedded_model: Path) -> None:
    llm = _llama_cpp(embedded_model)
    model = LlamaModel(embedded_model)
    for text in PROMPTS_EXACT:
        prompt = llm.tokenize(text.encode(), add_bos=False, special=True)
        ref = _greedy_llama_cpp(llm, prompt, 32)
        ours = _greedy_ours(model, prompt, 32)
        parted = next((i for i, (a, b) in enumerate(zip(ref, ours, strict=True)) if a != b), None)
        if parted is None:
            continue
        assert parted >= 8, (text, parted)  # the short test's promise holds on every CPU
        llm.reset()
        llm.eval(prompt + ref[:parted])
        logits = np.array(llm.scores[len(prompt) + parted - 1])
        margin = float(logits[ref[parted]] - logits[ours[parted]])
        assert 0 <= margin < NEAR_TIE_LOGITS, (text, parted, margin)


@pytest.mark.slow
def test_teacher_forced_logits_match_llama_cpp(embedded_model: Path) -> None:
    """Over llama.cpp's own 32-token continuation: same top-1 token at (nearly) every position, and
    a relative logit error of the size that 8-bit activation rounding alone produces (about 3%)."""
    llm = _llama_cpp(embedded_model)
    model = LlamaModel(embedded_model)
    for text in PROMPTS_EXACT + PROMPTS_NEAR_TIE:
        prompt = llm.tokenize(text.encode(), add_bos=False, special=True)
        seq = prompt + _greedy_llama_cpp(llm, prompt, 31)
        llm.reset()
        llm.eval(seq)
        ref = torch.tensor(np.array(llm.scores[: len(seq)]))
        ours = model.forward(torch.tensor(seq), 0, full_cache(model.config), all_logits=True)
        rel = ((ours - ref).norm(dim=-1) / ref.norm(dim=-1)).mean()
        agree = (ours.argmax(-1) == ref.argmax(-1)).float().mean()
        assert rel < 0.08, (text, float(rel))
        assert agree >= 0.9, (text, float(agree))
