"""KV cache and recurrent state bytes, exact to the byte against llama.cpp (0.3.36 as vendored).

Rules and where llama.cpp states them (paths under vendor/llama.cpp/src):
- n_ctx is padded up to a multiple of 256 (llama-context.cpp, `GGML_PAD(cparams.n_ctx, 256)`);
  0 means the trained context. Without a unified cache every sequence gets its own stream of
  `pad256(n_ctx / n_seq)` cells; with it one stream holds all n_ctx cells.
- The micro-batch the graphs and the SWA cache are sized with is `min(n_ubatch, n_batch, n_ctx)`
  (causal models: n_batch is capped at the requested n_ctx, before padding).
- Per layer with a cache: K is `[n_embd_head_k * n_head_kv(l), cells, streams]` of type_k, V the same
  with n_embd_head_v and type_v (llama-kv-cache.cpp). Without flash attention V is stored transposed
  and, when layers differ, padded to the widest layer (`n_embd_v_gqa_max`).
- MLA (DeepSeek-V2/V3, key_length_mla set): only K is allocated, one latent row of
  `kv_lora_rank + rope_dim` (= attention.key_length, n_head_kv = 1); V is a view of it.
- Sliding-window layers live in a second cache of
  `pad256(min(cells, window * (n_seq if unified else 1) + ubatch))` cells per stream, or the full
  size with swa_full (llama-kv-cache-iswa.cpp).
- Multi-token-prediction layers (`nextn_predict_layers`) get no cache in the main context. A plan
  that drafts with them (Settings.spec_type "mtp": llama-server's `--spec-type draft-mtp`) has a
  second context of type MTP whose cache is the family's plain cache over the MTP layers only
  (llama-model.cpp create_memory, `il >= n_layer()`), with the target's n_ctx and sequences and
  the draft's cache types (-ctkd/-ctvd, common_base_params_to_speculative): KvBreakdown.draft, on
  the MTP layer's device.
- Recurrent layers hold f32 conv and SSM states of `max(1, n_seq)` cells (llama-memory-recurrent.cpp).
- DeepSeek-V4 (`deepseek4`, llama-kv-cache-dsv4.cpp) has caches of its own, all K-only (K and V
  types must be equal; type_k is used) and all with one stream per sequence even when the cache is
  "unified" (its raw and compressed caches are built non-unified), each stream `n_ctx_seq` long
  (= n_ctx when unified, else pad256(n_ctx / n_seq)):
  window: every layer, `pad256(min(n_ctx_seq, window + ubatch))` cells (n_ctx_seq with swa_full) of
  `key_length * head_count_kv`; CSA: layers of ratio 4, `pad256(max(1, ceil(n_ctx_seq / 4)))` cells of
  the same row; HCA: layers of ratio 128, `pad256(max(1, ceil(n_ctx_seq / 128)))` cells; indexer:
  ratio-4 layers, CSA's cells of `indexer.key_length`; compressor states (f32, llama_dsv4_comp_state),
  `n_seq * (1 + n_rs_seq)` planes, a kv and a score tensor each: CSA `8 x 2*key_length`, HCA
  `128 x key_length`, indexer `8 x 2*indexer.key_length`. States skip the MTP layers; the caches
  cover every block (llama_kv_cache walks n_layer_all).
- DeepSeek-V3.2 (`deepseek32`, DSA; llama-kv-cache-dsa.cpp) keeps the MLA cache above and, beside
  it, a lightning-indexer cache: a second llama_kv_cache of the same cells, streams and type_k over
  the same (non-MTP) layers, K only, one head of `indexer.key_length`. llama.cpp logs it as a second
  `llama_kv_cache: size = ...` line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from vrampilot.gguf import ModelSpec
from vrampilot.planner.settings import QUANTIZED_KV_TYPES, Settings

CTX_PAD = 256  # llama-context.cpp and llama-kv-cache-iswa.cpp pad cell counts to 256
RECURRENT_STATE_BYTES = 4  # recurrent states are always GGML_TYPE_F32
RWKV_TOKEN_SHIFT_COUNT = 2  # llama-hparams.h default token_shift_count


def _pad(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def ggml_type(name: str) -> GGMLQuantizationType:
    """'q8_0' -> GGMLQuantizationType.Q8_0 (cache types as llama-server spells them)."""
    try:
        return GGMLQuantizationType[name.upper()]
    except KeyError:
        raise ValueError(f"unknown cache type {name!r}") from None


@functools.lru_cache(maxsize=4096)
def row_bytes(type_name: str, n: int) -> int:
    """ggml_row_size: bytes of a row of `n` elements (integer division, as release builds do)."""
    block, size = GGML_QUANT_SIZES[ggml_type(type_name)]
    return size * n // block


def block_size(type_name: str) -> int:
    return GGML_QUANT_SIZES[ggml_type(type_name)][0]


def kv_unified(settings: Settings) -> bool:
    """Whether one KV stream serves all sequences.

    llama-server with the default (auto) slot count runs 4 slots on a unified cache; an explicit
    `-np N` turns it off unless `-kvu` is given. Settings may carry `kv_unified`; without it the
    planner assumes llama-server's default. With one sequence both layouts are identical.
    """
    return bool(getattr(settings, "kv_unified", True))


def effective_ctx(spec: ModelSpec, settings: Settings) -> int:
    """n_ctx as llama.cpp allocates it: 0 = trained context, padded to 256, a multiple of the streams."""
    n_ctx = settings.n_ctx if settings.n_ctx > 0 else spec.n_ctx_train
    n_ctx = _pad(n_ctx, CTX_PAD)
    n_seq = max(1, settings.n_seq)
    if not kv_unified(settings):
        n_ctx = _pad(n_ctx // n_seq, CTX_PAD) * n_seq
    return n_ctx


def effective_ubatch(spec: ModelSpec, settings: Settings) -> int:
    """The micro-batch llama.cpp reserves graphs for: min(n_ubatch, n_batch, n_ctx).

    The cap uses n_ctx as requested, before padding (llama-context.cpp caps n_batch first), so
    n_ctx=1000 with n_ubatch=2048 reserves 1000 tokens.
    """
    n_ctx = settings.n_ctx if settings.n_ctx > 0 else spec.n_ctx_train
    n_batch = min(n_ctx, settings.n_batch)
    return min(n_batch, settings.n_ubatch if settings.n_ubatch > 0 else n_batch)


@dataclass(frozen=True)
class KvPart:
    """One cache of a family with several (DeepSeek-V4): as llama.cpp logs it, in its log order."""

    name: str  # "window", "csa", "hca", "indexer", "csa state", "hca state", "indexer state"; DSA: "mla", "indexer"
    cells: int  # cells per stream (states: rows per plane)
    layers: int
    streams: int  # streams (states: planes)
    bytes: int


@dataclass(frozen=True)
class KvBreakdown:
    n_cells: int  # cells per stream of the full-attention cache (what llama.cpp logs)
    n_cells_swa: int  # cells per stream of the sliding-window cache (0 without SWA layers)
    n_streams: int
    k_bytes: int
    v_bytes: int
    base_bytes: int  # the full-attention cache (llama.cpp's first `size = ...` line)
    swa_bytes: int  # the sliding-window cache (its second line)
    recurrent_bytes: int
    total_bytes: int  # k + v + recurrent + state (+ the MTP draft context's cache)
    per_layer_bytes: tuple[int, ...]  # K+V (+ recurrent state) of each layer, for the device split
    parts: tuple[KvPart, ...] = ()  # DeepSeek-V4: each cache and compressor state; V3.2: MLA and indexer
    state_bytes: int = 0  # DeepSeek-V4's f32 compressor states
    draft: KvPart | None = None  # the MTP draft context's own cache, when the plan drafts with MTP


def _kv_layers(spec: ModelSpec) -> list[int]:
    """Layers that own a KV cache in the main context."""
    n_main = spec.n_layer - spec.n_layer_nextn
    out = []
    for il in range(n_main):
        if spec.recurrent_layers and spec.recurrent_layers[il]:
            continue
        if spec.n_head_kv[il] == 0 and not spec.is_mla:
            continue
        out.append(il)
    return out


def _recurrent_row_elems(spec: ModelSpec) -> int:
    """n_embd_r + n_embd_s (llama-hparams.cpp) for Mamba- and RWKV-style layers."""
    if spec.wkv_head_size:
        return RWKV_TOKEN_SHIFT_COUNT * spec.n_embd + spec.n_embd * spec.wkv_head_size
    d_conv = max(spec.ssm_d_conv - 1, 0)
    n_r = d_conv * (spec.ssm_d_inner + 2 * spec.ssm_n_group * spec.ssm_d_state)
    n_s = spec.ssm_d_state * spec.ssm_d_inner
    return n_r + n_s


def drafts_with_mtp(spec: ModelSpec, settings: Settings) -> bool:
    """Whether the plan drafts with the model's own MTP block (llama-server's `--spec-type
    draft-mtp`): the settings ask for it, and the file has an MTP block to load."""
    return settings.drafts_mtp and spec.n_layer_nextn > 0


@dataclass(frozen=True)
class _AttentionCache:
    """One llama_kv_cache (and its sliding-window twin) over some layers, as llama-kv-cache.cpp sizes it."""

    cells: int
    cells_swa: int
    streams: int
    per_layer: tuple[int, ...]
    k_bytes: int
    v_bytes: int
    base_bytes: int
    swa_bytes: int


def _attention_cache(spec: ModelSpec, settings: Settings, layers: list[int]) -> _AttentionCache:
    n_seq = max(1, settings.n_seq)
    unified = kv_unified(settings)
    n_streams = 1 if unified else n_seq
    n_ctx = effective_ctx(spec, settings)
    cells = n_ctx if unified else n_ctx // n_seq
    ubatch = effective_ubatch(spec, settings)

    swa = spec.has_swa
    cells_swa = 0
    if swa:
        if settings.swa_full:
            cells_swa = cells
        else:
            cells_swa = _pad(min(cells, spec.sliding_window * (n_seq if unified else 1) + ubatch), CTX_PAD)

    v_trans = not settings.flash_attn
    mla = spec.is_mla

    def k_row(il: int) -> int:
        return spec.head_dim_k * spec.n_head_kv[il]

    def v_row(il: int) -> int:
        return spec.head_dim_v * spec.n_head_kv[il]

    # [TAG_V_CACHE_VARIABLE]: the transposed V of every layer is as wide as the widest (all layers
    # of the model, not only the cached ones: llama_hparams::n_embd_v_gqa_max).
    v_row_max = max((spec.head_dim_v * h for h in spec.n_head_kv), default=0)

    per_layer = [0] * spec.n_layer
    k_total = v_total = base = swa_total = 0
    for il in layers:
        n = cells_swa if swa and spec.swa_layers[il] else cells
        k = row_bytes(settings.type_k, k_row(il)) * n * n_streams
        v = 0 if mla else row_bytes(settings.type_v, v_row_max if v_trans else v_row(il)) * n * n_streams
        per_layer[il] = k + v
        k_total += k
        v_total += v
        if swa and spec.swa_layers[il]:
            swa_total += k + v
        else:
            base += k + v
    return _AttentionCache(cells, cells_swa, n_streams, tuple(per_layer), k_total, v_total, base, swa_total)


def _mtp_draft_cache(spec: ModelSpec, settings: Settings) -> tuple[KvPart, tuple[int, ...]] | None:
    """The cache of the MTP draft context (llama_context_params.ctx_type = LLAMA_CONTEXT_TYPE_MTP,
    the model loaded with load_mtp), when the plan drafts with it.

    llama-model.cpp's create_memory gives that context the architecture's plain cache filtered to
    the MTP layers (`il >= n_layer()`): DeepSeek-V4 a sliding-window cache with K and V (not its
    compressed caches), V3.2 an MLA cache without the indexer, DeepSeek-V2/V3 and GLM-4.5 their MLA
    or GQA cache. common/speculative.cpp creates it with the target's n_ctx and sequences and no
    rollback snapshots, so cells and streams follow the main context's rules.
    """
    if not drafts_with_mtp(spec, settings):
        return None
    mtp = list(range(spec.n_layer - spec.n_layer_nextn, spec.n_layer))
    c = _attention_cache(spec, settings.mtp_context(), mtp)
    cells = c.cells_swa if spec.has_swa and all(spec.swa_layers[il] for il in mtp) else c.cells
    return KvPart("mtp draft", cells, len(mtp), c.streams, c.k_bytes + c.v_bytes), c.per_layer


def kv_cache_bytes(spec: ModelSpec, settings: Settings) -> KvBreakdown:
    """Bytes llama.cpp allocates for the KV cache (and recurrent state) with these settings; with
    MTP drafting, the draft context's cache too (KvBreakdown.draft)."""
    kv = _dsv4_cache_bytes(spec, settings) if spec.compress_ratios else _main_cache_bytes(spec, settings)
    found = _mtp_draft_cache(spec, settings)
    if found is None:
        return kv
    draft, per_layer = found
    return replace(
        kv,
        per_layer_bytes=tuple(a + b for a, b in zip(kv.per_layer_bytes, per_layer, strict=True)),
        total_bytes=kv.total_bytes + draft.bytes,
        draft=draft,
    )


def _main_cache_bytes(spec: ModelSpec, settings: Settings) -> KvBreakdown:
    n_seq = max(1, settings.n_seq)
    layers = _kv_layers(spec)
    c = _attention_cache(spec, settings, layers)
    cells, n_streams = c.cells, c.streams
    per_layer = list(c.per_layer)
    k_total, v_total = c.k_bytes, c.v_bytes

    parts: tuple[KvPart, ...] = ()
    if spec.indexer_head_size:  # DSA: the lightning indexer's own cache (llama_kv_cache_dsa)
        row = row_bytes(settings.type_k, spec.indexer_head_size) * cells * n_streams
        for il in layers:
            per_layer[il] += row
        indexer = row * len(layers)
        parts = (
            KvPart("mla", cells, len(layers), n_streams, k_total),
            KvPart("indexer", cells, len(layers), n_streams, indexer),
        )
        k_total += indexer

    recurrent = 0
    if any(spec.recurrent_layers):
        per_state = _recurrent_row_elems(spec) * RECURRENT_STATE_BYTES * n_seq
        for il, rec in enumerate(spec.recurrent_layers):
            if rec:
                per_layer[il] += per_state
                recurrent += per_state

    return KvBreakdown(
        n_cells=cells,
        n_cells_swa=c.cells_swa,
        n_streams=n_streams,
        k_bytes=k_total,
        v_bytes=v_total,
        base_bytes=c.base_bytes,
        swa_bytes=c.swa_bytes,
        recurrent_bytes=recurrent,
        total_bytes=k_total + v_total + recurrent,
        per_layer_bytes=tuple(per_layer),
        parts=parts,
    )


DSV4_CSA_RATIO = 4
DSV4_HCA_RATIO = 128
_DSV4_CSA_STATE_ROWS = 2 * DSV4_CSA_RATIO  # overlapped compression keeps two blocks
_F32 = 4


def _dsv4_cache_bytes(spec: ModelSpec, settings: Settings) -> KvBreakdown:
    """DeepSeek-V4's caches and compressor states, as llama_kv_cache_dsv4's constructor builds them."""
    n_seq = max(1, settings.n_seq)
    n_ctx = effective_ctx(spec, settings)
    cells = n_ctx if kv_unified(settings) else n_ctx // n_seq  # cparams.n_ctx_seq
    streams = n_seq  # per sequence even when unified
    planes = streams * (1 + settings.rollback_snapshots)
    ubatch = effective_ubatch(spec, settings)
    window = cells if settings.swa_full else _pad(min(cells, spec.sliding_window + ubatch), CTX_PAD)

    def comp_cells(ratio: int) -> int:
        return _pad(max(1, -(-cells // ratio)), CTX_PAD)

    hd, ihd = spec.head_dim_k, spec.indexer_head_size
    n_main = spec.n_layer - spec.n_layer_nextn
    # (name, cells, the ratio of its layers (None: every layer), K row elements (0: one head row))
    caches: list[tuple[str, int, int | None, int]] = [
        ("window", window, None, 0),
        ("csa", comp_cells(DSV4_CSA_RATIO), DSV4_CSA_RATIO, 0),
        ("hca", comp_cells(DSV4_HCA_RATIO), DSV4_HCA_RATIO, 0),
        ("indexer", comp_cells(DSV4_CSA_RATIO), DSV4_CSA_RATIO, ihd),
    ]
    # (name, rows, the ratio of its layers, f32 elements per row): llama_dsv4_comp_state
    states = [
        ("csa state", _DSV4_CSA_STATE_ROWS, DSV4_CSA_RATIO, 2 * hd),
        ("hca state", DSV4_HCA_RATIO, DSV4_HCA_RATIO, hd),
        ("indexer state", _DSV4_CSA_STATE_ROWS, DSV4_CSA_RATIO, 2 * ihd),
    ]
    per_layer = [0] * spec.n_layer
    parts: list[KvPart] = []
    for name, n_cells, ratio, row in caches:
        total = n_layers = 0
        for il in range(spec.n_layer):
            if ratio is not None and spec.compress_ratios[il] != ratio:
                continue
            b = row_bytes(settings.type_k, row or hd * spec.n_head_kv[il]) * n_cells * streams
            per_layer[il] += b
            total += b
            n_layers += 1
        parts.append(KvPart(name, n_cells, n_layers, streams, total))
    for name, rows, ratio, width in states:
        layers = [il for il in range(n_main) if spec.compress_ratios[il] == ratio]
        b = 2 * width * rows * _F32 * planes  # a kv and a score tensor
        for il in layers:
            per_layer[il] += b
        parts.append(KvPart(name, rows, len(layers), planes, b * len(layers)))
    k_bytes = sum(p.bytes for p in parts[:4])
    state_bytes = sum(p.bytes for p in parts[4:])
    return KvBreakdown(
        n_cells=cells,
        n_cells_swa=window,
        n_streams=streams,
        k_bytes=k_bytes,
        v_bytes=0,
        base_bytes=0,  # the raw cache's non-window half has no layer
        swa_bytes=parts[0].bytes,
        recurrent_bytes=0,
        total_bytes=k_bytes + state_bytes,
        per_layer_bytes=tuple(per_layer),
        parts=tuple(parts),
        state_bytes=state_bytes,
    )


def kv_refusal(spec: ModelSpec, settings: Settings) -> str | None:
    """llama.cpp's own reason for refusing these cache settings, or None when it accepts them.

    Same checks, order and wording as llama_init_from_model (llama-context.cpp), without the
    "llama_init_from_model: " prefix of the log line. Flash attention is explicit (on/off), as the
    planner passes it; with `-fa auto` llama.cpp would turn it on for a quantized V instead.
    An MTP draft context llama.cpp would crash on (DeepSeek-V4) is refused here in words of ours.
    """
    for name in (settings.type_k, settings.type_v):
        ggml_type(name)  # ValueError for a type llama.cpp does not know
    if (spec.is_mla or spec.compress_ratios) and settings.type_k != settings.type_v:
        return f"model does not support different K ({settings.type_k}) and V ({settings.type_v}) cache types"
    if settings.type_v in QUANTIZED_KV_TYPES and not settings.flash_attn:
        return "quantized V cache requires flash_attn to be enabled"
    n_main = spec.n_layer - spec.n_layer_nextn
    if spec.compress_ratios and drafts_with_mtp(spec, settings):
        # DeepSeek-V4's MTP draft graph attends through a plain window cache: a compressing MTP
        # block asserts (deepseek4.cpp), and a key as long as the indexer's makes the draft cache's
        # empty full-attention half rotate and divide by zero (build_input_k_rot). Both kill the
        # process, so they are refused here although llama.cpp has no message for them.
        ratio = spec.compress_ratios[n_main]
        if ratio:
            return f"the MTP block has compression ratio {ratio}; llama.cpp drafts only with an uncompressed one"
        if spec.head_dim_k == spec.indexer_head_size:
            return f"key_length equals the indexer's ({spec.head_dim_k}): llama.cpp's MTP draft context crashes"
    if settings.flash_attn and settings.type_k in QUANTIZED_KV_TYPES:
        blck = block_size(settings.type_k)
        if n_main > 0 and spec.head_dim_k % blck:
            return (
                f"K cache type {settings.type_k} with block size {blck} does not divide n_embd_head_k={spec.head_dim_k}"
            )
    if settings.flash_attn and settings.type_v in QUANTIZED_KV_TYPES:
        blck = block_size(settings.type_v)
        if n_main > 0 and spec.head_dim_v % blck:
            return (
                f"V cache type {settings.type_v} with block size {blck} does not divide n_embd_head_v={spec.head_dim_v}"
            )
    return None
