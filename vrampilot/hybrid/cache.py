"""KV caches behind `LlamaModel`: the full cache, the plain sliding window and the hybrid cache.

All of them take the same call, `attend(layer, q, k, v, pos0)`, for a chunk of n new tokens at
positions pos0..pos0+n-1 (a prefill chunk or one decode step), store what they keep of the new
keys and values, and return the attention output. One code path serves prefill and decode, so a
perplexity run measures exactly what generation would do.

Hybrid layer (kinds W, C, H; see config.py), for a query at position t with block size m:
- raw: the sinks (positions < S) and every token from c(t) to t, where c(t) = S + m * nb(t) and
  nb(t) = max(0, (t - W - S) // m) is the number of whole blocks that lie entirely before the W
  tokens preceding t. So a block becomes an entry only once its window has closed, a query never
  sees a token both raw and merged, and the raw tail holds between W and W + m - 1 tokens.
- entries: blocks 0..nb(t)-1 merged into one key/value each (C: top-k of them per KV head chosen by
  an indexer; H: all of them), or, with csa_read="raw", the raw tokens of the top-k blocks.
- one softmax over raw logits and entry logits; a merged entry's logit gets + log(m), so that it
  carries the softmax mass of the m tokens it replaced when their logits are alike.
Kind W (the StreamingLLM baseline) is the same with m = 1 and the leaving tokens dropped. Kind R
keeps every leaving token raw in FP8 (blocks of RAW_BLOCK tokens, no indexer) and reads them all.

Per-KV-head kinds (config.retrieval_heads): a layer whose KV heads differ becomes a `MixedLayer`,
which hands each group of same-kind KV heads (with their query heads) to its own cache. Attention
never mixes heads, so this is exact: a head kept full gives exactly the full cache's output.

Sinks and the raw tail are stored in f16 like llama.cpp's cache; entries in FP8 with a power-of-two
scale per group of 32 (or f16 with storage="f16"). `bytes_held()` adds up every tensor a layer keeps
between calls, scales and indexer summaries included.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F

from vrampilot.hybrid.config import HybridConfig
from vrampilot.hybrid.fp8 import Fp8Tensor, cat_fp8, quantize_fp8
from vrampilot.hybrid.layer_plan import Q4_GROUP, RAW_BLOCK, LayerPlan, config_kv_bytes, head_plans
from vrampilot.hybrid.model import ModelConfig, Rope
from vrampilot.hybrid.q4 import Q4Tensor, cat_q4, hadamard, quantize_q4

__all__ = ["RAW_BLOCK", "LayerPlan"]  # re-exported: the plan and its block size are part of this API

KV_DTYPE = torch.float16  # raw tokens: the dtype of llama.cpp's default cache
Stored = torch.Tensor | Fp8Tensor | Q4Tensor


def _nbytes(t: Stored | None) -> int:
    if t is None:
        return 0
    if isinstance(t, Fp8Tensor | Q4Tensor):
        return t.nbytes
    return t.numel() * t.element_size()


class _Packed:
    """Entry storage: FP8 with group scales, llama.cpp's q4_0 (optionally rotated), or f16 (for
    ablations and exactness tests)."""

    def __init__(self, storage: str, group: int, head_dim: int, rotate: bool = False) -> None:
        self.storage = storage
        # Heads smaller than a group (tiny test models) use one group per head.
        self.group = math.gcd(group, head_dim)
        self.q4_group = math.gcd(Q4_GROUP, head_dim)
        self.rotate = rotate

    def pack(self, x: torch.Tensor) -> Stored:
        if self.storage == "fp8":
            return quantize_fp8(x, self.group)
        if self.storage == "q4":
            return quantize_q4(x, rotate=self.rotate, group=self.q4_group)
        return x.to(KV_DTYPE)

    @property
    def rotated(self) -> bool:
        return self.storage == "q4" and self.rotate

    @staticmethod
    def unpack(p: Stored, *, rotate_back: bool = True) -> torch.Tensor:
        if isinstance(p, Q4Tensor):
            return p.dequantize(rotate_back=rotate_back)
        return p.dequantize() if isinstance(p, Fp8Tensor) else p.float()

    @staticmethod
    def cat(a: Stored | None, b: Stored, dim: int) -> Stored:
        if a is None:
            return b
        if isinstance(a, Fp8Tensor) and isinstance(b, Fp8Tensor):
            return cat_fp8([a, b], dim)
        if isinstance(a, Q4Tensor) and isinstance(b, Q4Tensor):
            return cat_q4([a, b], dim)
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return torch.cat((a, b), dim=dim)

    @staticmethod
    def drop_front(p: Stored, n: int) -> Stored:
        """Drop the first n vectors along dim 1 (the token or entry axis)."""
        if isinstance(p, Q4Tensor):
            return p.narrow(1, n, p.data.shape[1] - n)
        if isinstance(p, Fp8Tensor):
            return Fp8Tensor(p.data[:, n:].clone(), p.exponent[:, n:].clone(), p.group)
        return p[:, n:].clone()


class LayerCache(ABC):
    # Largest prefill chunk that gives the same result as token-by-token decoding (None: any).
    max_chunk: int | None = None

    def __init__(self, mc: ModelConfig) -> None:
        self.n_head_kv = mc.n_head_kv
        self.n_group = mc.n_group
        self.head_dim = mc.head_dim
        self.scale = 1.0 / math.sqrt(mc.head_dim)
        self.n_tokens = 0

    @abstractmethod
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int) -> torch.Tensor:
        """q (n_head, n, d) and k, v (n_head_kv, n, d), already rotated; returns (n_head, n, d)."""

    @abstractmethod
    def bytes_held(self) -> int: ...

    def _check_pos(self, pos0: int, n: int) -> None:
        # Caches keep no positions of their own: tokens must arrive in order, without gaps.
        if pos0 != self.n_tokens:
            raise ValueError(f"cache holds {self.n_tokens} tokens; cannot append at position {pos0}")
        self.n_tokens += n


class FullLayer(LayerCache):
    """Every token's K and V in f16: the reference the hybrid cache is measured against."""

    def __init__(self, mc: ModelConfig) -> None:
        super().__init__(mc)
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int) -> torch.Tensor:
        n = q.shape[1]
        self._check_pos(pos0, n)
        k16, v16 = k.to(KV_DTYPE), v.to(KV_DTYPE)
        self.k = k16 if self.k is None else torch.cat((self.k, k16), dim=1)
        self.v = v16 if self.v is None else torch.cat((self.v, v16), dim=1)
        total = self.k.shape[1]
        qpos = torch.arange(pos0, pos0 + n)
        mask = torch.arange(total)[None, :] <= qpos[:, None]
        return F.scaled_dot_product_attention(
            q, self.k.float(), self.v.float(), attn_mask=mask, scale=self.scale, enable_gqa=True
        )

    def bytes_held(self) -> int:
        return _nbytes(self.k) + _nbytes(self.v)


class HybridLayer(LayerCache):
    def __init__(self, mc: ModelConfig, plan: LayerPlan, rope: Rope) -> None:
        super().__init__(mc)
        self.plan = plan
        self.rope = rope
        self.packer = _Packed(plan.storage, plan.group, mc.head_dim, plan.rotate)
        # Sinks and the raw window: f16 like llama.cpp's default cache, or its plain q4_0 (the
        # same-bytes q4_0 baseline); either way every query reads them as they are stored.
        self.raw = _Packed(plan.raw_storage, plan.group, mc.head_dim)
        h, d = mc.n_head_kv, mc.head_dim
        empty = torch.empty(h, 0, d)
        self.sink_k, self.sink_v = self.raw.pack(empty), self.raw.pack(empty)
        self.tail_k, self.tail_v = self.raw.pack(empty), self.raw.pack(empty)
        self.tail_start = plan.n_sink  # position of tail_k[:, 0]
        # Attention each raw tail token has received (summed over queries and grouped heads);
        # only kept when entries are pooled by attention.
        self.tail_attn: torch.Tensor | None = (
            torch.zeros(h, 0) if plan.pooling == "attn" and plan.keep_entries and not plan.read_raw else None
        )
        if self.tail_attn is not None:
            # Blocks are pooled with the attention received before the current chunk; chunks no
            # longer than the window keep that close to what one-token decoding sees.
            self.max_chunk = plan.window
        self.n_entries = 0  # blocks that have left the window so far
        self.first_entry = 0  # the oldest block still held (R with a reach drops older ones)
        self.entry_k: Stored | None = None  # (h, N, d) pooled, or (h, N*m, d) raw: blocks first_entry..
        self.entry_v: Stored | None = None
        self.index_a: Stored | None = None  # mean keys, or Quest per-channel min
        self.index_b: Stored | None = None  # Quest per-channel max

    # --- state -------------------------------------------------------------------------------
    def bytes_held(self) -> int:
        held = (self.sink_k, self.sink_v, self.tail_k, self.tail_v, self.tail_attn)
        entries = (self.entry_k, self.entry_v, self.index_a, self.index_b)
        return sum(_nbytes(t) for t in held) + sum(_nbytes(t) for t in entries)

    def _append(self, k: torch.Tensor, v: torch.Tensor, pos0: int) -> None:
        n_sink_new = max(0, min(self.plan.n_sink - pos0, k.shape[1]))
        raw = self.raw
        if n_sink_new:
            self.sink_k = raw.cat(self.sink_k, raw.pack(k[:, :n_sink_new]), dim=1)
            self.sink_v = raw.cat(self.sink_v, raw.pack(v[:, :n_sink_new]), dim=1)
        self.tail_k = raw.cat(self.tail_k, raw.pack(k[:, n_sink_new:]), dim=1)
        self.tail_v = raw.cat(self.tail_v, raw.pack(v[:, n_sink_new:]), dim=1)
        if self.tail_attn is not None:
            self.tail_attn = torch.cat((self.tail_attn, torch.zeros(self.n_head_kv, k.shape[1] - n_sink_new)), dim=1)

    def _compress_until(self, n_blocks: int) -> None:
        """Turn blocks n_entries..n_blocks-1 (still in the raw tail) into entries; the raw tokens stay
        until `_drop_until` so that earlier queries of the same chunk can still read them raw."""
        p = self.plan
        todo = n_blocks - self.n_entries
        if todo <= 0:
            return
        if not p.keep_entries:
            self.n_entries = n_blocks
            return
        m = p.block
        first = self.n_entries * m + p.n_sink  # position of the first token to merge
        off = first - self.tail_start
        k = self.raw.unpack(self.tail_k)[:, off : off + todo * m].unflatten(1, (todo, m))  # (h, todo, m, d)
        v = self.raw.unpack(self.tail_v)[:, off : off + todo * m].unflatten(1, (todo, m))
        if p.read_raw:
            self.entry_k = self.packer.cat(self.entry_k, self.packer.pack(k.flatten(1, 2)), dim=1)
            self.entry_v = self.packer.cat(self.entry_v, self.packer.pack(v.flatten(1, 2)), dim=1)
            if p.top_k is None:
                pass  # every block is read: no indexer summaries to keep
            elif p.indexer == "quest":
                self.index_a = self.packer.cat(self.index_a, self.packer.pack(k.amin(dim=2)), dim=1)
                self.index_b = self.packer.cat(self.index_b, self.packer.pack(k.amax(dim=2)), dim=1)
            else:
                self.index_a = self.packer.cat(self.index_a, self.packer.pack(k.mean(dim=2)), dim=1)
        else:
            if self.tail_attn is not None:
                a = self.tail_attn[:, off : off + todo * m].unflatten(1, (todo, m))
                total = a.sum(dim=2, keepdim=True)
                w = torch.where(total > 0, a / total.clamp_min(1e-30), torch.full_like(a, 1.0 / m))
            else:
                w = torch.full((self.n_head_kv, todo, m), 1.0 / m)
            if p.key_pool == "rerope":
                pos = torch.arange(first, first + todo * m)
                k_pre = self.rope.apply(k.flatten(1, 2), pos, inverse=True).unflatten(1, (todo, m))
                pooled_pre = (w.unsqueeze(-1) * k_pre).sum(dim=2)
                pooled_k = self.rope.apply(pooled_pre, torch.arange(first, first + todo * m, m))
            else:
                pooled_k = (w.unsqueeze(-1) * k).sum(dim=2)
            pooled_v = (w.unsqueeze(-1) * v).sum(dim=2)
            self.entry_k = self.packer.cat(self.entry_k, self.packer.pack(pooled_k), dim=1)
            self.entry_v = self.packer.cat(self.entry_v, self.packer.pack(pooled_v), dim=1)
            if p.indexer == "quest":
                self.index_a = self.packer.cat(self.index_a, self.packer.pack(k.amin(dim=2)), dim=1)
                self.index_b = self.packer.cat(self.index_b, self.packer.pack(k.amax(dim=2)), dim=1)
            # The mean indexer of pooled entries reads the entry keys themselves: nothing extra held.
        self.n_entries = n_blocks

    def _evict_until(self, first: int) -> None:
        """Forget blocks older than `first` (kind R with a reach: they left the head's budget)."""
        cut = first - self.first_entry
        if cut <= 0 or self.entry_k is None or self.entry_v is None:
            return
        per = self.plan.block if self.plan.read_raw else 1
        self.entry_k = self.packer.drop_front(self.entry_k, cut * per)
        self.entry_v = self.packer.drop_front(self.entry_v, cut * per)
        self.first_entry = first

    def _drop_until(self, start: int) -> None:
        cut = start - self.tail_start
        if cut <= 0:
            return
        self.tail_k = self.raw.drop_front(self.tail_k, cut)
        self.tail_v = self.raw.drop_front(self.tail_v, cut)
        if self.tail_attn is not None:
            self.tail_attn = self.tail_attn[:, cut:].clone()
        self.tail_start = start

    # --- attention ---------------------------------------------------------------------------
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int) -> torch.Tensor:
        p = self.plan
        n = q.shape[1]
        self._check_pos(pos0, n)
        self._append(k, v, pos0)
        qpos = torch.arange(pos0, pos0 + n)
        nb = p.n_blocks(qpos)
        self._compress_until(int(nb[-1]))

        h, g, d = self.n_head_kv, self.n_group, self.head_dim
        qg = q.view(h, g, n, d)
        raw_k = torch.cat((self.raw.unpack(self.sink_k), self.raw.unpack(self.tail_k)), dim=1)
        raw_v = torch.cat((self.raw.unpack(self.sink_v), self.raw.unpack(self.tail_v)), dim=1)
        n_sink = self.sink_k.shape[1]
        kpos = torch.cat((torch.arange(n_sink), torch.arange(self.tail_start, self.tail_start + self.tail_k.shape[1])))
        raw_logits = torch.einsum("hgnd,hrd->hgnr", qg, raw_k) * self.scale
        raw_logits = raw_logits.masked_fill(~p.raw_mask(qpos, kpos), float("-inf"))

        parts_logits = [raw_logits]
        parts_values = [raw_v]
        back: torch.Tensor | None = None
        if p.keep_entries and self.n_entries > self.first_entry:
            e_logits, e_values, back = self._entry_logits(qg, qpos, nb)
            parts_logits.append(e_logits)
            parts_values.append(e_values)

        logits = torch.cat(parts_logits, dim=-1)
        probs = torch.softmax(logits, dim=-1)
        out = torch.einsum("hgnr,hrd->hgnd", probs[..., : raw_k.shape[1]], raw_v)
        if len(parts_values) > 1:
            e_out = torch.einsum("hgne,hed->hgnd", probs[..., raw_k.shape[1] :], parts_values[1])
            out = out + (e_out if back is None else e_out @ back)

        if self.tail_attn is not None:
            self.tail_attn += probs[..., n_sink : raw_k.shape[1]].sum(dim=(1, 2))
        next_pos = torch.tensor([pos0 + n])
        self._compress_until(int(p.n_blocks(next_pos)[0]))
        self._drop_until(int(p.raw_start(next_pos)[0]))
        self._evict_until(int(p.first_block(next_pos)[0]))
        return out.reshape(h * g, n, d)

    def _entry_logits(
        self, qg: torch.Tensor, qpos: torch.Tensor, nb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Logits (h, g, n, E) and values (h, E, d) of the compressed branch, masked to what each
        query may read: visible entries (index < nb(t)), and for C layers the top-k per KV head.
        The third item, when not None, is the rotation that takes the branch's output back (its
        entries were left in the rotated space, and the queries rotated instead: q.k = qH.kH)."""
        p = self.plan
        assert self.entry_k is not None and self.entry_v is not None
        n_e = self.n_entries - self.first_entry
        # Quest's per-channel bounds need channels as they are; every other reader is a dot product.
        back = hadamard(self.head_dim) if self.packer.rotated and p.indexer != "quest" else None
        ek = self.packer.unpack(self.entry_k, rotate_back=back is None)
        ev = self.packer.unpack(self.entry_v, rotate_back=back is None)
        if back is not None:
            qg = qg @ back
        index = torch.arange(self.first_entry, self.n_entries)[None, :]
        visible = (index < nb[:, None]) & (index >= p.first_block(qpos)[:, None])  # (n, N)
        selected = visible[None].expand(self.n_head_kv, -1, -1)  # (h, n, N)
        if p.top_k is not None and p.top_k < n_e:
            scores = self._index_scores(qg, ek)  # (h, n, N)
            scores = scores.masked_fill(~visible[None], float("-inf"))
            top = scores.topk(p.top_k, dim=-1).indices
            chosen = torch.zeros_like(selected).scatter_(-1, top, True)
            selected = chosen & visible[None]
        if p.read_raw:
            m = p.block
            logits = torch.einsum("hgnd,hed->hgne", qg, ek) * self.scale  # ek: (h, N*m, d)
            mask = selected.repeat_interleave(m, dim=-1)[:, None]
        else:
            logits = torch.einsum("hgnd,hed->hgne", qg, ek) * self.scale + p.merge_bias
            mask = selected[:, None]
        return logits.masked_fill(~mask, float("-inf")), ev, back

    def _index_scores(self, qg: torch.Tensor, ek: torch.Tensor) -> torch.Tensor:
        """Indexer score per (KV head, query, entry): the best over the KV head's query heads, so a
        block one head needs is read even when its group mates look elsewhere."""
        p = self.plan
        if p.indexer == "quest":
            assert self.index_a is not None and self.index_b is not None
            lo = self.packer.unpack(self.index_a)  # (h, N, d)
            hi = self.packer.unpack(self.index_b)
            # Quest's bound: sum over channels of max(q*min, q*max) >= q.k for every key in the block.
            bound = torch.maximum(qg.unsqueeze(-2) * lo[:, None, None], qg.unsqueeze(-2) * hi[:, None, None]).sum(-1)
            return bound.amax(dim=1)
        keys = self.packer.unpack(self.index_a) if p.read_raw and self.index_a is not None else ek
        assert keys is not None
        return torch.einsum("hgnd,hed->hgne", qg, keys).amax(dim=1)


class MixedLayer(LayerCache):
    """One layer whose KV heads have different plans (kinds, or budgets): each group of same-plan KV
    heads, with the query heads that read it, goes to its own cache. Outputs land back in the
    layer's head order."""

    def __init__(self, mc: ModelConfig, parts: Sequence[tuple[Sequence[int], LayerCache]]) -> None:
        super().__init__(mc)
        heads = sorted(h for idx, _ in parts for h in idx)
        if heads != list(range(mc.n_head_kv)):
            raise ValueError(f"parts must cover KV heads 0..{mc.n_head_kv - 1} once each, got {heads}")
        g = self.n_group
        self.parts = [(torch.tensor(list(idx)), cache) for idx, cache in parts]
        # Query heads of KV head h are h*g .. h*g+g-1 (the grouping SDPA's enable_gqa and HybridLayer use).
        self.q_index = [torch.tensor([h * g + j for h in idx for j in range(g)]) for idx, _ in parts]
        limits = [cache.max_chunk for _, cache in parts if cache.max_chunk is not None]
        self.max_chunk = min(limits) if limits else None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int) -> torch.Tensor:
        self._check_pos(pos0, q.shape[1])
        out = torch.empty_like(q)
        for (kv_idx, cache), q_idx in zip(self.parts, self.q_index, strict=True):
            out[q_idx] = cache.attend(q[q_idx], k[kv_idx], v[kv_idx], pos0)
        return out

    def bytes_held(self) -> int:
        return sum(cache.bytes_held() for _, cache in self.parts)


class AttentionCache:
    """One LayerCache per layer, plus byte accounting over all of them."""

    def __init__(self, layers: Sequence[LayerCache], name: str) -> None:
        self.layers = list(layers)
        self.name = name

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int) -> torch.Tensor:
        return self.layers[layer].attend(q, k, v, pos0)

    @property
    def max_chunk(self) -> int | None:
        limits = [layer.max_chunk for layer in self.layers if layer.max_chunk is not None]
        return min(limits) if limits else None

    @property
    def n_tokens(self) -> int:
        return self.layers[0].n_tokens if self.layers else 0

    def bytes_held(self) -> int:
        return sum(layer.bytes_held() for layer in self.layers)


def full_cache(mc: ModelConfig) -> AttentionCache:
    return AttentionCache([FullLayer(mc) for _ in range(mc.n_layer)], "full")


def window_cache(mc: ModelConfig, rope: Rope, window: int, n_sink: int = 4, *, storage: str = "f16") -> AttentionCache:
    """The plain StreamingLLM baseline: sinks + the last `window` tokens in every layer, in f16 or in
    llama.cpp's q4_0 (storage="q4": the uniform q4_0 cache, cut to the window)."""
    cfg = window_config(window, n_sink, storage)
    return hybrid_cache(mc, rope, cfg)


def window_config(window: int, n_sink: int = 4, storage: str = "f16") -> HybridConfig:
    name = "window" if storage == "f16" else f"window-{storage}"
    return HybridConfig(name=name, window=window, n_sink=n_sink, layout_cycle="W", window_storage=storage).validate()  # type: ignore[arg-type]  # storage is one of the window storage literals


def _layer_cache(mc: ModelConfig, rope: Rope, plan: LayerPlan | None) -> LayerCache:
    return FullLayer(mc) if plan is None else HybridLayer(mc, plan, rope)


def hybrid_cache(mc: ModelConfig, rope: Rope, cfg: HybridConfig) -> AttentionCache:
    layers: list[LayerCache] = []
    for plans in head_plans(cfg, mc.n_layer, mc.n_head_kv, mc.shape):
        if len(set(plans)) == 1:
            layers.append(_layer_cache(mc, rope, plans[0]))
            continue
        parts: list[tuple[list[int], LayerCache]] = []
        for plan in dict.fromkeys(plans):  # each plan once, in order of first appearance
            idx = [h for h, p in enumerate(plans) if p == plan]
            sub = replace(mc, n_head_kv=len(idx), n_head=len(idx) * mc.n_group)
            parts.append((idx, _layer_cache(sub, rope, plan)))
        layers.append(MixedLayer(mc, parts))
    return AttentionCache(layers, cfg.name)


def window_for_bytes(mc: ModelConfig, budget_bytes: int, n_sink: int = 4, storage: str = "f16") -> int:
    """The longest window (tokens besides the sinks) whose cache holds at most `budget_bytes` once
    full, in f16 or q4_0; the bytes come from the same count as every config's (layer_plan.py)."""
    per_token = config_kv_bytes(window_config(1, n_sink, storage), mc.cache_shape, 1)
    return max(1, budget_bytes // per_token - n_sink)
