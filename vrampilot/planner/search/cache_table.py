"""The cache explained: a model's KV cache by part at a few context lengths, beside "what if" caches.

The "what if" columns answer "what would the same model need with a plain cache?": each is the
model's ModelSpec with its attention rewritten (every layer full attention, no compression, no
sliding window, no recurrent state) and sized by the one memory model, `kv_cache_bytes`, never by
a second formula. Their assumptions are part of the result, so every view prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vrampilot.gguf import ModelSpec
from vrampilot.planner.dry_run.graph import graph_compute
from vrampilot.planner.families import COUNTED_BY_LLAMA_CPP, is_routed
from vrampilot.planner.memory.kv import KvBreakdown, kv_cache_bytes
from vrampilot.planner.settings import Settings
from vrampilot.units import format_tokens

CONTEXTS = (8192, 32768, 131072, 1048576)
WHAT_IF_TYPE = "f16"  # bf16 has the same size
GQA_KV_HEADS = 8
MLA_KV_LORA_RANK = 512
MLA_ROPE_DIM = 64
# DeepSeek-V4's 512-wide key is one shared row (MQA), not a head: a plain cache of the same model
# is given heads of this size, the head size DeepSeek's own V4 report compares with.
PLAIN_HEAD_DIM = 128


@dataclass(frozen=True)
class CacheRow:
    n_ctx: int
    parts: tuple[tuple[str, int], ...]  # (part name, bytes) for this model, as planned
    total_bytes: int
    what_if: tuple[tuple[str, int], ...]  # (variant name, bytes)


# Where a table's rows come from (CacheTable.source), as the plan says it for its own cache.
FORMULA_SOURCE = "formula"  # planner/memory/kv.py, verified on this architecture
COUNTED_SOURCE = "llama.cpp"  # llama.cpp's dry run at each context (a routed architecture)
ESTIMATE_SOURCE = "estimate"  # the formula on a routed architecture llama.cpp could not count


@dataclass(frozen=True)
class CacheTable:
    type_k: str
    type_v: str
    rows: tuple[CacheRow, ...]
    assumptions: tuple[str, ...]  # one line per what-if variant
    source: str = FORMULA_SOURCE
    architecture: str = ""

    @property
    def source_text(self) -> str:
        if self.source == COUNTED_SOURCE:
            return f"{COUNTED_BY_LLAMA_CPP}: its dry run at each context; K and V summed over its caches"
        if self.source == ESTIMATE_SOURCE:
            return (
                f"estimated: the part split is the cache formula, not verified on {self.architecture!r}, "
                "and llama.cpp could not count it"
            )
        return "as planned"

    def as_dict(self) -> dict[str, Any]:
        return {
            "type_k": self.type_k,
            "type_v": self.type_v,
            "source": self.source,
            "source_text": self.source_text,
            "what_if_type": WHAT_IF_TYPE,
            "rows": [
                {
                    "n_ctx": r.n_ctx,
                    "parts": dict(r.parts),
                    "total_bytes": r.total_bytes,
                    "what_if": dict(r.what_if),
                }
                for r in self.rows
            ],
            "assumptions": list(self.assumptions),
        }


def tokens_label(n_ctx: int) -> str:
    """8K, 32K, 128K, 1M: the contexts as people say them."""
    return "1M" if n_ctx == 1048576 else format_tokens(n_ctx)


def parts_of(kv: KvBreakdown) -> tuple[tuple[str, int], ...]:
    """This cache's parts: DeepSeek-V4's caches and one line for its states, DeepSeek-V3.2's MLA and
    indexer caches, else the K/V split; last, an MTP draft context's cache when the plan drafts."""
    draft = ((kv.draft.name, kv.draft.bytes),) if kv.draft else ()
    if kv.parts:
        caches = tuple((p.name, p.bytes) for p in kv.parts if not p.name.endswith(" state"))
        if len(caches) == len(kv.parts):  # no compressor state (DSA)
            return (*caches, *draft)
        return (*caches, ("state", kv.state_bytes), *draft)
    out: list[tuple[str, int]] = [("K", kv.k_bytes), ("V", kv.v_bytes)]
    if kv.recurrent_bytes:
        out.append(("state", kv.recurrent_bytes))
    return (*out, *draft)


def _plain_dims(spec: ModelSpec) -> tuple[int, int]:
    """The K and V head sizes a plain cache of this model would have."""
    if spec.compress_ratios:
        return PLAIN_HEAD_DIM, PLAIN_HEAD_DIM
    if spec.is_mla:  # the heads MLA decompresses to
        return spec.head_dim_k_mla, spec.head_dim_v_mla
    return spec.head_dim_k, spec.head_dim_v


def _full_attention(spec: ModelSpec) -> ModelSpec:
    n = spec.n_layer
    return replace(
        spec,
        compress_ratios=(),
        indexer_head_size=0,
        sliding_window=0,
        swa_layers=(False,) * n,
        recurrent_layers=(False,) * n,
        kv_lora_rank=0,
        head_dim_k_mla=0,
        head_dim_v_mla=0,
    )


def what_if_specs(spec: ModelSpec) -> tuple[tuple[str, ModelSpec, str], ...]:
    """(name, variant, assumption) for a plain MHA, GQA and MLA cache of this model."""
    base = _full_attention(spec)
    hk, hv = _plain_dims(spec)
    heads = tuple(h or max(spec.n_head, default=0) for h in spec.n_head)
    n_main = spec.n_layer - spec.n_layer_nextn
    gqa = tuple(min(GQA_KV_HEADS, h) for h in heads)
    mla_k = MLA_KV_LORA_RANK + MLA_ROPE_DIM
    mha_spec = replace(base, n_head_kv=heads, head_dim_k=hk, head_dim_v=hv)
    gqa_spec = replace(base, n_head_kv=gqa, head_dim_k=hk, head_dim_v=hv)
    mla_spec = replace(
        base,
        n_head_kv=(1,) * spec.n_layer,
        head_dim_k=mla_k,
        head_dim_v=MLA_KV_LORA_RANK,
        kv_lora_rank=MLA_KV_LORA_RANK,
        head_dim_k_mla=hk + MLA_ROPE_DIM,
        head_dim_v_mla=hv,
    )
    layers = f"{n_main} layers, all full attention, {WHAT_IF_TYPE} K and V, one sequence"
    return (
        ("MHA", mha_spec, f"MHA: {max(heads, default=0)} KV heads (one per query head) of {hk}/{hv} (K/V); {layers}"),
        ("GQA", gqa_spec, f"GQA: {GQA_KV_HEADS} KV heads of {hk}/{hv} (K/V); {layers}"),
        (
            "MLA",
            mla_spec,
            f"MLA: one latent row of {mla_k} (kv_lora_rank {MLA_KV_LORA_RANK} + rope {MLA_ROPE_DIM}), K only; {layers}",
        ),
    )


def cache_table(spec: ModelSpec, settings: Settings, contexts: tuple[int, ...] = CONTEXTS) -> CacheTable:
    """This model's cache by part with `settings` (its cache types, sequences, window settings)
    at each context, and the what-if caches at the same contexts.

    An architecture the formula is not verified on (planner/families.py) gets llama.cpp's own
    count at each context instead, as its plan does: the dry run's K, V and state, not a formula's
    split. Where llama.cpp cannot count it, the formula's rows are labelled an estimate.
    """
    variants = what_if_specs(spec)
    plain = Settings(n_ctx=0, type_k=WHAT_IF_TYPE, type_v=WHAT_IF_TYPE, flash_attn=True)
    counted = _counted_parts(spec, settings, contexts) if is_routed(spec.architecture) else None
    rows = []
    for i, n_ctx in enumerate(contexts):
        at = replace(settings, n_ctx=n_ctx)
        parts = counted[i] if counted is not None else parts_of(kv_cache_bytes(spec, at))
        what_if = tuple((name, kv_cache_bytes(v, replace(plain, n_ctx=n_ctx)).total_bytes) for name, v, _ in variants)
        rows.append(CacheRow(n_ctx, parts, sum(b for _, b in parts), what_if))
    if counted is not None:
        source = COUNTED_SOURCE
    else:
        source = ESTIMATE_SOURCE if is_routed(spec.architecture) else FORMULA_SOURCE
    assumptions = tuple(a for _, _, a in variants)
    return CacheTable(settings.type_k, settings.type_v, tuple(rows), assumptions, source, spec.architecture)


def _counted_parts(
    spec: ModelSpec, settings: Settings, contexts: tuple[int, ...]
) -> list[tuple[tuple[str, int], ...]] | None:
    """llama.cpp's dry run (no allocation; the one the planner asks, headers and results kept) at
    each context: K and V summed over the caches it logs, and its states; None when it cannot count
    one of them (no llama.cpp here, a file it cannot load, its log held by a model loading)."""
    out = []
    for n_ctx in contexts:
        m = graph_compute(spec.path, replace(settings, n_ctx=n_ctx))
        if m is None or m.refused is not None or not m.kv_lines:
            return None
        parts = [("K", m.k_bytes), ("V", m.v_bytes)]
        if m.state_bytes:
            parts.append(("state", m.state_bytes))
        out.append(tuple(parts))
    return out
