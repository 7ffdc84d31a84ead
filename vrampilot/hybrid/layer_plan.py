"""What one KV head of the hybrid cache keeps, and the bytes that costs: torch-free.

`LayerPlan` is resolved from a `HybridConfig` and a head's kind. The cache (cache.py) runs it; this
module only counts, so the app can show what each config would hold for a chat of any length
without importing torch, and the calibration can size per-head budgets before anything runs. The
counts are exact: tests compare them with `bytes_held()` of real caches after real runs.

Storage costs per vector of `d` values:
  f16   2 d bytes (sinks and the raw window, like llama.cpp's default cache)
  fp8   d + d / 32 bytes (e4m3 values, one exponent byte per group of 32)
  q4    d / 2 + 2 d / 32 bytes (llama.cpp's q4_0: 4-bit codes, an f16 scale per block of 32)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from vrampilot.errors import UserError

if TYPE_CHECKING:
    import torch

    from vrampilot.hybrid.config import CacheShape, HybridConfig, LayerKind

Storage = Literal["fp8", "f16", "q4"]
RAW_BLOCK = 16  # kind R: tokens move from the f16 window to compressed storage this many at a time
F16_BYTES = 2
FP8_GROUP = 32
Q4_GROUP = 32  # llama.cpp's QK4_0


def vector_bytes(storage: str, d: int, group: int = FP8_GROUP) -> int:
    """Bytes of one stored vector of d values (a key or a value of one head), scales included."""
    if storage == "f16":
        return F16_BYTES * d
    if storage == "fp8":
        return d + d // math.gcd(group, d)
    if storage == "q4":
        return d // 2 + F16_BYTES * (d // math.gcd(Q4_GROUP, d))
    raise ValueError(f"unknown storage {storage!r}")


@dataclass(frozen=True)
class LayerPlan:
    """What one hybrid KV head (or a group of same-plan heads) does."""

    kind: LayerKind
    n_sink: int
    window: int
    block: int  # m: tokens per entry (1 for kind W)
    top_k: int | None  # None: read every entry (H, R)
    keep_entries: bool  # False for W: blocks leaving the window are dropped
    read_raw: bool  # C with csa_read="raw", and R: entries are raw tokens
    indexer: str
    pooling: str
    key_pool: str
    merge_bias: float
    storage: Storage = "fp8"  # how entries (or R's older tokens) are stored
    group: int = FP8_GROUP  # FP8 scale group (q4 always uses blocks of 32)
    rotate: bool = False  # q4: Hadamard-rotate each vector before quantizing (llama.cpp #21038)
    reach: int | None = None  # R: older tokens kept beyond the window, in whole blocks (None: all)
    raw_storage: Storage = "f16"  # sinks and the raw window: f16, or q4 (the q4_0 window baseline)

    @staticmethod
    def for_kind(kind: LayerKind, cfg: HybridConfig, reach: int | None = None) -> LayerPlan:
        store = {
            "storage": cfg.storage,
            "group": cfg.fp8_group,
            "rotate": cfg.rotate,
            "raw_storage": cfg.window_storage,
        }
        if kind == "W":
            return LayerPlan(
                "W",
                cfg.n_sink,
                cfg.window,
                1,
                None,
                False,
                False,
                "mean",
                "mean",
                "rotated",
                0.0,
                **store,  # type: ignore[arg-type]  # store is a dict of LayerPlan's storage fields
            )
        if kind == "H":
            m = cfg.hca_ratio
            return LayerPlan(
                "H",
                cfg.n_sink,
                cfg.window,
                m,
                None,
                True,
                False,
                "mean",
                cfg.pooling,
                cfg.key_pool,
                math.log(m) if cfg.merge_bias else 0.0,
                **store,  # type: ignore[arg-type]  # store is a dict of LayerPlan's storage fields
            )
        if kind == "C":
            m = cfg.csa_ratio
            raw = cfg.csa_read == "raw"
            return LayerPlan(
                "C",
                cfg.n_sink,
                cfg.window,
                m,
                cfg.top_k,
                True,
                raw,
                cfg.indexer,
                cfg.pooling,
                cfg.key_pool,
                math.log(m) if cfg.merge_bias and not raw else 0.0,
                **store,  # type: ignore[arg-type]  # store is a dict of LayerPlan's storage fields
            )
        if kind == "R":
            blocks = None if reach is None else -(-reach // RAW_BLOCK)  # whole blocks, rounded up
            return LayerPlan(
                "R",
                cfg.n_sink,
                cfg.window,
                RAW_BLOCK,
                None,
                True,
                True,
                "none",
                "mean",
                "rotated",
                0.0,
                reach=None if blocks is None else blocks * RAW_BLOCK,
                **store,  # type: ignore[arg-type]  # store is a dict of LayerPlan's storage fields
            )
        raise ValueError(f"layer kind {kind!r} has no hybrid plan")

    @property
    def reach_blocks(self) -> int | None:
        return None if self.reach is None else self.reach // self.block

    # Tensor forms of the schedule (cache.py); only tensor methods, so this module needs no torch.
    def n_blocks(self, qpos: torch.Tensor) -> torch.Tensor:
        """Entries visible to a query at each position: whole blocks before its W-token window."""
        return ((qpos - self.window - self.n_sink) // self.block).clamp(min=0)

    def first_block(self, qpos: torch.Tensor) -> torch.Tensor:
        """First entry still held for a query at each position (R with a reach drops older ones)."""
        nb = self.n_blocks(qpos)
        return nb * 0 if self.reach_blocks is None else (nb - self.reach_blocks).clamp(min=0)

    def raw_start(self, qpos: torch.Tensor) -> torch.Tensor:
        """First non-sink raw position visible at each query position: c(t)."""
        return self.n_sink + self.n_blocks(qpos) * self.block

    def raw_mask(self, qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor:
        """(n, R) True where query qpos reads raw key kpos: sinks, and c(t) <= kpos <= t."""
        q = qpos[:, None]
        k = kpos[None, :]
        return (k <= q) & ((k < self.n_sink) | (k >= self.raw_start(qpos)[:, None]))

    def blocks_closed(self, n_tokens: int) -> int:
        """Blocks that have left the window once the cache holds n_tokens (the next query's nb)."""
        return max(0, (n_tokens - self.window - self.n_sink) // self.block)

    def kv_bytes(self, n_tokens: int, head_dim: int) -> int:
        """Bytes one KV head holds after n_tokens, exactly as `HybridLayer.bytes_held()` counts them."""
        d = head_dim
        raw_token = 2 * vector_bytes(self.raw_storage, d)  # K and V
        nb = self.blocks_closed(n_tokens)
        sinks = min(n_tokens, self.n_sink)
        tail = n_tokens - sinks - nb * self.block
        held = (sinks + tail) * raw_token
        if self.pooling == "attn" and self.keep_entries and not self.read_raw:
            held += tail * 4  # the attention each tail token has received, float32
        if not self.keep_entries:
            return held
        vec = vector_bytes(self.storage, d, self.group)
        kept = nb if self.reach_blocks is None else min(nb, self.reach_blocks)
        if self.read_raw:
            held += kept * self.block * 2 * vec  # raw K and V of every kept token
            if self.top_k is not None:
                held += kept * vec * (2 if self.indexer == "quest" else 1)  # per-block summaries
        else:
            held += kept * 2 * vec  # pooled K and V
            if self.indexer == "quest":
                held += kept * 2 * vec  # per-channel min and max keys
        return held


def full_head_bytes(n_tokens: int, head_dim: int) -> int:
    """Bytes one KV head of the f16 full cache holds (llama.cpp's default)."""
    return n_tokens * 2 * F16_BYTES * head_dim


def cache_bytes(plans: Sequence[Sequence[LayerPlan | None]], n_tokens: int, head_dim: int) -> int:
    """Bytes a whole cache holds after n_tokens: `plans[layer][kv_head]`, None for a full-cache head."""
    return sum(
        full_head_bytes(n_tokens, head_dim) if p is None else p.kv_bytes(n_tokens, head_dim)
        for layer in plans
        for p in layer
    )


def head_plans(
    cfg: HybridConfig, n_layer: int, n_head_kv: int, model_shape: tuple[int, ...] = ()
) -> tuple[tuple[LayerPlan | None, ...], ...]:
    """What every KV head runs under `cfg`, layer by layer (None: the full cache); the bytes of a
    config and the caches it builds both come from here."""
    reach = {(il, h): r for il, h, r in cfg.head_reach} if cfg.applies_heads_to(model_shape) else {}
    for il, h in reach:
        if il >= n_layer or h >= n_head_kv:
            raise UserError(
                f"hybrid config {cfg.name!r}: head ({il}, {h}) is outside the model's "
                f"{n_layer} layers x {n_head_kv} KV heads"
            )
    return tuple(
        tuple(
            None if kind == "F" else LayerPlan.for_kind(kind, cfg, reach.get((il, h), cfg.reach))
            for h, kind in enumerate(kinds)
        )
        for il, kinds in enumerate(cfg.head_kinds(n_layer, n_head_kv, model_shape))
    )


def config_kv_bytes(cfg: HybridConfig, shape: CacheShape, n_tokens: int) -> int:
    """Bytes `cfg`'s cache holds after n_tokens on a model of this shape (torch-free)."""
    return cache_bytes(head_plans(cfg, shape.n_layer, shape.n_head_kv, shape.model_shape), n_tokens, shape.head_dim)
