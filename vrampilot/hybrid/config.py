"""Hybrid-cache settings and the named configurations that `--config NAME` selects.

Layer kinds, one letter each:
  F  full cache (every token raw, f16)
  W  sinks + raw window only (forgets the rest; StreamingLLM)
  C  CSA-like: sinks + window + entries of `csa_ratio` tokens, an indexer, top-k per KV head
  H  HCA-like: sinks + window + entries of `hca_ratio` tokens, all attended
  R  raw tokens: sinks + window in f16, older tokens in `storage` (FP8 or 4-bit), all attended (no
     selection); `reach` caps how many older tokens a head keeps (None: every one)

Kinds apply per layer (`layout_head`, `layout_cycle`) and can be overridden per KV head:
`retrieval_heads` lists (layer, KV head) pairs that get `retrieval_kind` instead of their layer's
kind (DuoAttention / RazorAttention: a few heads retrieve, the rest only need recent tokens).
`head_reach` gives single (layer, KV head) pairs their own reach (budgets that differ per head and
layer, as in Ada-KV / PyramidKV; None keeps every token). Attention is per head, so a layer whose
heads differ splits exactly along its KV heads, each part with its own cache and its own softmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from vrampilot.errors import UserError

LayerKind = Literal["F", "W", "C", "H", "R"]
_KINDS = frozenset("FWCHR")


@dataclass(frozen=True)
class CacheShape:
    """What the byte count of a config needs of a model: its KV layout, and the shape that decides
    whether calibrated heads apply (ModelConfig.shape: n_layer, n_head, n_head_kv, head_dim, n_vocab)."""

    n_layer: int
    n_head_kv: int
    head_dim: int
    model_shape: tuple[int, ...] = ()

    @property
    def f16_kv_bytes_per_token(self) -> int:
        return self.n_layer * self.n_head_kv * self.head_dim * 2 * 2


@dataclass(frozen=True)
class HybridConfig:
    name: str = "custom"
    description: str = ""
    n_sink: int = 4
    window: int = 128
    csa_ratio: int = 4
    hca_ratio: int = 128
    top_k: int = 64  # CSA entries (pooled) or pages (raw) read per KV head per query
    # Layer layout: `layout_head` for the first layers, then `layout_cycle` repeated.
    layout_head: str = ""
    layout_cycle: str = "CH"
    indexer: Literal["mean", "quest"] = "mean"
    csa_read: Literal["pooled", "raw"] = "pooled"
    pooling: Literal["mean", "attn"] = "mean"
    # "rotated": average keys after RoPE (the mean logit of the merged tokens, exactly);
    # "rerope": average pre-RoPE keys and rotate them at the entry's first position (V4's way).
    key_pool: Literal["rotated", "rerope"] = "rotated"
    # Entries and R's older tokens: FP8 (e4m3, power-of-two scale per group of fp8_group), llama.cpp's
    # q4_0 (4-bit, f16 scale per 32 values; `rotate`: a Hadamard rotation first), or f16.
    storage: Literal["fp8", "f16", "q4"] = "fp8"
    fp8_group: int = 32
    rotate: bool = False
    reach: int | None = None  # kind R: older tokens kept beyond the window (None: all)
    # Sinks and the raw window: f16 (llama.cpp's default cache) or its plain q4_0, unrotated (the
    # same-bytes q4_0 baseline: a uniform llama.cpp-style q4_0 cache cut to a window).
    window_storage: Literal["f16", "q4"] = "f16"
    merge_bias: bool = True  # add log(m) to a merged entry's logit
    # Per-KV-head overrides: these (layer, KV head) pairs get `retrieval_kind` (see the module doc).
    retrieval_heads: tuple[tuple[int, int], ...] = ()
    retrieval_kind: LayerKind = "F"
    # The model the heads were found on, as ModelConfig.shape (n_layer, n_head, n_head_kv, head_dim,
    # n_vocab). Calibrated heads mean nothing on another model, so there only the layer kinds apply;
    # empty: apply the heads to any model that has them.
    retrieval_model: tuple[int, ...] = ()
    # Per-(layer, KV head) reach for kind R, calibrated like retrieval_heads (and applied under the
    # same retrieval_model condition); heads not named keep `reach`.
    head_reach: tuple[tuple[int, int, int | None], ...] = ()

    def layer_kinds(self, n_layer: int) -> tuple[LayerKind, ...]:
        kinds: list[str] = []
        for il in range(n_layer):
            if il < len(self.layout_head):
                kinds.append(self.layout_head[il])
            else:
                cycle = self.layout_cycle or "F"
                kinds.append(cycle[(il - len(self.layout_head)) % len(cycle)])
        return tuple(kinds)  # type: ignore[arg-type]  # letters checked against LayerKind in __post_init__

    def applies_heads_to(self, model_shape: tuple[int, ...]) -> bool:
        return bool(self.retrieval_heads or self.head_reach) and (
            not self.retrieval_model or tuple(self.retrieval_model) == tuple(model_shape)
        )

    def head_kinds(
        self, n_layer: int, n_head_kv: int, model_shape: tuple[int, ...] = ()
    ) -> tuple[tuple[LayerKind, ...], ...]:
        """The kind of every KV head, layer by layer: the layer's kind unless `retrieval_heads` names it
        (and the heads were calibrated on this model: see `retrieval_model`)."""
        chosen = set(self.retrieval_heads) if self.applies_heads_to(model_shape) else set()
        for il, h in chosen:
            if il >= n_layer or h >= n_head_kv:
                raise UserError(
                    f"hybrid config {self.name!r}: retrieval head ({il}, {h}) is outside the model's "
                    f"{n_layer} layers x {n_head_kv} KV heads"
                )
        return tuple(
            tuple(self.retrieval_kind if (il, h) in chosen else kind for h in range(n_head_kv))
            for il, kind in enumerate(self.layer_kinds(n_layer))
        )

    def validate(self) -> HybridConfig:
        bad = set(self.layout_head + self.layout_cycle + self.retrieval_kind) - _KINDS
        if bad or len(self.retrieval_kind) != 1:
            raise UserError(f"hybrid config {self.name!r}: unknown layer kind(s) {sorted(bad)}; use F, W, C, H, R")
        if any(il < 0 or h < 0 for il, h in self.retrieval_heads) or len(set(self.retrieval_heads)) != len(
            self.retrieval_heads
        ):
            raise UserError(
                f"hybrid config {self.name!r}: retrieval heads must be distinct, non-negative (layer, head) pairs"
            )
        for what, value in (("window", self.window), ("csa_ratio", self.csa_ratio), ("hca_ratio", self.hca_ratio)):
            if value < 1:
                raise UserError(f"hybrid config {self.name!r}: {what} must be at least 1")
        if self.n_sink < 0 or self.top_k < 1:
            raise UserError(f"hybrid config {self.name!r}: n_sink must be >= 0 and top_k >= 1")
        if any(r is not None and r < 0 for r in (self.reach, *(r for _, _, r in self.head_reach))):
            raise UserError(f"hybrid config {self.name!r}: reach must be >= 0 (or None: every token)")
        return self

    def with_(self, **changes: object) -> HybridConfig:
        return replace(self, **changes).validate()  # type: ignore[arg-type]  # a dict of HybridConfig fields; validate() checks them

    def with_reach_rows(self, rows: Sequence[Sequence[Any]], name: str) -> HybridConfig:
        """This config with the per-head reaches of saved rows (layer, KV head, reach, then anything
        the file adds, such as a score), as bench/hybrid_calibrate.py writes them."""
        reach = tuple((int(r[0]), int(r[1]), None if r[2] is None else int(r[2])) for r in rows)
        return self.with_(name=name, head_reach=reach)


# The named configurations. Budget arithmetic for SmolLM2-135M (3 KV heads x 64 dims, 30 layers):
# the f16 full cache holds 768 B per token per layer, 256 B per KV head. A pooled FP8 entry of m
# tokens costs 2 x 3 x (64 + 2) = 396 B, i.e. 99 B/token at m = 4 and 3 B/token at m = 128. A token
# kept raw in FP8 costs 2 x (64 + 2) = 132 B per KV head. The 15% target at 8K is 28.3 MB in all.

# Found by bench/hybrid_calibrate.py (vrampilot/hybrid/calibrate.py: attention from the answer onto the
# needle in full-cache runs over calibration prompts that share nothing with the evaluation's). The
# 8 KV heads scoring above 0.4 (of 90); the ninth scores 0.37. (layer, KV head), sorted.
SMOLLM2_135M = (30, 9, 3, 64, 49152)  # ModelConfig.shape of the embedded SmolLM2-135M-Instruct
SMOLLM2_RETRIEVAL_HEADS = ((7, 2), (14, 1), (17, 1), (18, 2), (20, 1), (20, 2), (21, 2), (23, 0))
# Broad heads: on the same calibration prompts, the KV heads (outside the 8 above) whose query heads
# put the most attention beyond the sinks and a 680-token window while the answer starts (its first
# two tokens): 0.71, 0.70, 0.72, 0.73 of their mass (docs/hybrid-cache.md).
# They read the whole context rather than the needle; without them (and without the log(m) bias on
# the other heads' HCA entries) the answer's first token at 8K, a space before the digits, loses to
# " the".
SMOLLM2_BROAD_HEADS = ((5, 1), (6, 0), (7, 0), (8, 1))

# Chosen by measurement (bench/hybrid.py, and the ablations in docs/hybrid-cache.md):
# - Averaged entries (CSA m=4, HCA m=128) do not carry passkey retrieval on this untrained model.
#   Keeping every token of a few retrieval heads does: 8 heads x 8K tokens x 132 B = 8.6 MB.
# - The other 82 KV heads keep sinks + a raw window + HCA entries (nearly free, 3 B/token/layer; no
#   log(m) bias: with it HCA entries took too much attention at 8K).
# - 32 sink tokens instead of StreamingLLM's 4: at 8K (not at 2-6K) the streaming heads need the
#   prompt's opening instruction, or the answer never starts (4 or 16 sinks: 0 of 5 development
#   cases at 8K; 32: 2 of 5, full cache 3 of 5). The window baseline gets the same 32 sinks.
# - The window (680) is what fits 14.9% of the f16 cache at every length from 7.9K to 8K (the
#   raw tail of an HCA head swings between W and W + 127 tokens).
# Against the previous default (now `long-window`: sinks + 896 window + HCA) it measured lower
# perplexity at 8K (26.62 vs 27.05) and kept retrieval at 8K, so it was the default until
# `head-budgets` (at 10% of the bytes where this holds 13.8%).
_RETRIEVAL = HybridConfig(
    name="retrieval",
    description="8 calibrated retrieval KV heads keep every token (window f16, older tokens FP8); the other 82 "
    "keep 32 sinks + a 680-token raw window + HCA entries (m=128, FP8, no log(m) bias)",
    n_sink=32,
    window=680,
    layout_cycle="H",
    merge_bias=False,
    retrieval_heads=SMOLLM2_RETRIEVAL_HEADS,
    retrieval_kind="R",
    retrieval_model=SMOLLM2_135M,
)

# The other end of the trade-off (bench/hybrid.py, docs/hybrid-cache.md): passkey at 8K 5/10 where the full cache
# finds 6/10 (the default 4/10), but perplexity +4.5% at 8K (default +2.5%), worse there than a
# plain window of the same bytes: the log(m) bias it needs costs perplexity at 8K.
_BROAD = _RETRIEVAL.with_(
    name="retrieval-broad",
    description="12 calibrated KV heads (8 retrieval + 4 broad) keep every token (window f16, older tokens FP8); "
    "the other 78 keep 32 sinks + a 540-token raw window + HCA entries (m=128, FP8, log(m) bias)",
    window=540,
    merge_bias=True,
    retrieval_heads=tuple(sorted(SMOLLM2_RETRIEVAL_HEADS + SMOLLM2_BROAD_HEADS)),
)

# Per-head budgets (bench/hybrid_calibrate.py --budgets, vrampilot/hybrid/budgets.py): every KV head
# keeps 32 sinks and a 64-token f16 window, then older tokens in 4-bit (q4_0 after a Hadamard
# rotation) as far back as its reach; the reaches spend 9.9% of the f16 cache's bytes at 8K.
BUDGET_LENGTH = 8192
BUDGET_SHARE = 0.099


def budget_base() -> HybridConfig:
    """The default config before its per-head reaches: what the budget calibration sizes."""
    return HybridConfig(
        name="budgets",
        n_sink=32,
        window=64,
        layout_cycle="R",
        storage="q4",
        rotate=True,
        reach=0,
    ).validate()


# Found on SmolLM2-135M from calibration data only: bench/hybrid_calibrate.py --budgets --spread 8
# --aggregate max (eight budget prompts with needles 0.7K-7.1K back, the largest far mass over them,
# plus the development text), then chosen by --select among six allocations of the same bytes on
# prompts of another seed (8 of 8 keys answered, the previous reaches 6 of 8;
# docs/hybrid-cache.md). Each KV head's reach, (layer, KV head, reach), None keeping
# every token.
SMOLLM2_HEAD_REACH: tuple[tuple[int, int, int | None], ...] = (
    (0, 0, 4032),
    (0, 1, 3008),
    (0, 2, 4032),
    (1, 0, 3008),
    (1, 1, 1984),
    (1, 2, 1984),
    (2, 0, 1472),
    (2, 1, 3008),
    (2, 2, 3008),
    (3, 0, 4032),
    (3, 1, 3008),
    (3, 2, 3008),
    (4, 0, 4032),
    (4, 1, 4032),
    (4, 2, 4032),
    (5, 0, 3008),
    (5, 1, 3008),
    (5, 2, 3008),
    (6, 0, 4032),
    (6, 1, 3008),
    (6, 2, 4032),
    (7, 0, 4032),
    (7, 1, 4032),
    (7, 2, None),
    (8, 0, 4032),
    (8, 1, 4032),
    (8, 2, 3008),
    (9, 0, 3008),
    (9, 1, 3008),
    (9, 2, 3008),
    (10, 0, 3008),
    (10, 1, 3008),
    (10, 2, 1984),
    (11, 0, 320),
    (11, 1, 1984),
    (11, 2, 704),
    (12, 0, 960),
    (12, 1, 704),
    (12, 2, 192),
    (13, 0, 960),
    (13, 1, 64),
    (13, 2, 320),
    (14, 0, 1472),
    (14, 1, 6080),
    (14, 2, 704),
    (15, 0, 3008),
    (15, 1, 960),
    (15, 2, 3008),
    (16, 0, 704),
    (16, 1, 704),
    (16, 2, 960),
    (17, 0, 3008),
    (17, 1, None),
    (17, 2, 960),
    (18, 0, 960),
    (18, 1, 448),
    (18, 2, None),
    (19, 0, 1984),
    (19, 1, 1472),
    (19, 2, 64),
    (20, 0, 1984),
    (20, 1, 6080),
    (20, 2, None),
    (21, 0, 960),
    (21, 1, 3008),
    (21, 2, None),
    (22, 0, 1472),
    (22, 1, 960),
    (22, 2, 960),
    (23, 0, None),
    (23, 1, 1472),
    (23, 2, 960),
    (24, 0, 1472),
    (24, 1, 3008),
    (24, 2, 4032),
    (25, 0, 960),
    (25, 1, 448),
    (25, 2, 320),
    (26, 0, 1984),
    (26, 1, 960),
    (26, 2, 448),
    (27, 0, 704),
    (27, 1, 960),
    (27, 2, 320),
    (28, 0, 1472),
    (28, 1, 704),
    (28, 2, 1984),
    (29, 0, 1984),
    (29, 1, 1984),
    (29, 2, 1984),
)
# Heads of other models (or not named above) keep this many older tokens: the uniform reach that
# fits BUDGET_SHARE at BUDGET_LENGTH for a head of 64 dims (9.85%).
UNIFORM_REACH = 2512

_HEAD_BUDGETS = budget_base().with_(
    name="head-budgets",
    description="every KV head keeps 32 sinks + a 64-token f16 window, and older tokens in 4-bit (q4_0 after a "
    "Hadamard rotation) as far back as its calibrated budget: 64 to 6,080 tokens, or all of them",
    reach=UNIFORM_REACH,
    head_reach=SMOLLM2_HEAD_REACH,
    retrieval_model=SMOLLM2_135M,
)

CONFIGS: dict[str, HybridConfig] = {
    c.name: c.validate()
    for c in (
        replace(_HEAD_BUDGETS, name="default"),
        _HEAD_BUDGETS,
        # The same bytes spread evenly: every head the same reach (what calibration is measured against).
        budget_base().with_(
            name="q4-uniform",
            description="every KV head keeps 32 sinks + a 64-token f16 window + the 2512 older tokens before it in "
            "4-bit (q4_0 after a Hadamard rotation): the default's bytes without calibrated budgets",
            reach=UNIFORM_REACH,
        ),
        _RETRIEVAL,
        _BROAD,
        # The previous default: on this model averaged CSA entries (m=4) cost 99 B/token/layer and bought
        # less perplexity than the same bytes spent on raw window, HCA entries are nearly free, and at 8K
        # the log(m) bias made HCA entries take too much attention (ppl 27.16 with it, 27.05 without). It
        # loses passkey retrieval once the key leaves the window.
        HybridConfig(
            name="long-window",
            description="sinks + 896-token raw window + HCA entries (m=128, FP8, dense, no log(m) bias) in every layer",
            window=896,
            layout_cycle="H",
            merge_bias=False,
        ),
        HybridConfig(
            name="v4",
            description="DeepSeek-V4's shape: sinks + 128-token window; CSA (m=4, pooled, mean-key indexer, "
            "top-64) alternating with HCA (m=128); FP8 entries",
        ),
        HybridConfig(
            name="pooled",
            description="every layer CSA-pooled (m=4, top-64): the closest analogue of DeepSeek-V4's CSA",
            layout_cycle="C",
        ),
        HybridConfig(
            name="quest",
            description="every layer reads the raw FP8 tokens of its top-16 pages (16 tokens each, chosen by "
            "Quest min/max bounds): the selection ceiling; holds about half the f16 cache, far over budget",
            csa_ratio=16,
            top_k=16,
            indexer="quest",
            csa_read="raw",
            layout_cycle="C",
        ),
        HybridConfig(
            name="hca",
            description="every layer HCA (m=128, dense) behind a 128-token window: the cheapest setting",
            layout_cycle="H",
        ),
    )
}


def get_config(name: str) -> HybridConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise UserError(f"unknown hybrid config {name!r}; choose one of: {', '.join(CONFIGS)}") from None


def dev_text_path() -> Path:
    """The second text (Milton's Areopagitica, public domain) shipped in resources/hybrid: for choosing
    settings and calibrating budgets, never the evaluation's."""
    from vrampilot.paths import resources_dir

    return resources_dir() / "hybrid" / "milton-areopagitica.txt"


def default_text_path() -> Path | None:
    """The evaluation text shipped in resources/hybrid (public domain), or None in a bundle without it."""
    from vrampilot.paths import resources_dir

    try:
        candidate = resources_dir() / "hybrid" / "britannica-shakespeare.txt"
    except FileNotFoundError:
        return None
    return candidate if candidate.is_file() else None
