"""Mechanics of the caches on small synthetic inputs: masks, when entries appear, one softmax,
selection, equality with the full cache when nothing is compressed, and byte accounting."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

from vrampilot.hybrid.cache import (
    FullLayer,
    HybridLayer,
    LayerCache,
    LayerPlan,
    full_cache,
    hybrid_cache,
    window_cache,
    window_for_bytes,
)
from vrampilot.hybrid.config import HybridConfig
from vrampilot.hybrid.layer_plan import config_kv_bytes
from vrampilot.hybrid.model import LlamaModel, ModelConfig, Rope

from .conftest import TinyLlama

H, G, D = 2, 2, 32  # KV heads, query heads per KV head, head size
MC = ModelConfig(
    n_layer=1,
    n_embd=H * G * D,
    n_head=H * G,
    n_head_kv=H,
    head_dim=D,
    n_ff=8,
    n_vocab=16,
    n_rot=D,
    rope_base=10000.0,
    rms_eps=1e-5,
    n_ctx_train=4096,
    tied_embeddings=True,
    bos_token_id=None,
    eos_token_id=None,
)
ROPE = Rope(D, D, 10000.0)


def _qkv(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(H * G, n, D, generator=g), torch.randn(H, n, D, generator=g), torch.randn(H, n, D, generator=g))


def _layer(kind: str, **cfg: object) -> HybridLayer:
    c = HybridConfig(**cfg).validate()  # type: ignore[arg-type]  # a dict of the fields; mypy cannot match **dict to each
    return HybridLayer(MC, LayerPlan.for_kind(kind, c), ROPE)  # type: ignore[arg-type]  # cfg is a HybridConfig built from the fields


def _run(layer: LayerCache, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    outs = [
        layer.attend(q[:, s : s + chunk], k[:, s : s + chunk], v[:, s : s + chunk], s)
        for s in range(0, q.shape[1], chunk)
    ]
    return torch.cat(outs, dim=1)


def test_entry_schedule_and_raw_mask() -> None:
    plan = LayerPlan.for_kind("C", HybridConfig(n_sink=2, window=8, csa_ratio=4))
    t = torch.arange(30)
    nb = plan.n_blocks(t)
    # Block 0 holds positions 2..5; it closes once all of them are older than the 8 tokens before t.
    assert nb[13] == 0 and nb[14] == 1 and nb[17] == 1 and nb[18] == 2
    assert int(plan.raw_start(torch.tensor([14]))[0]) == 6
    mask = plan.raw_mask(torch.tensor([3, 14]), torch.arange(15))
    assert mask[0].tolist() == [True] * 4 + [False] * 11  # causal, sinks included
    assert mask[1].tolist() == [True, True] + [False] * 4 + [True] * 9  # sinks, then 6..14


def test_entries_appear_only_after_their_window_closes() -> None:
    layer = _layer("C", n_sink=2, window=8, csa_ratio=4, storage="f16")
    q, k, v = _qkv(40)
    for t in range(40):
        layer.attend(q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1], t)
        nxt = torch.tensor([t + 1])
        assert layer.n_entries == int(layer.plan.n_blocks(nxt)[0])
        # The raw tail is exactly what the next query reads raw: c(t+1)..t, between W and W+m-1 tokens.
        assert layer.tail_start == int(layer.plan.raw_start(nxt)[0])
        if t + 1 >= 2 + 8:
            assert 8 <= layer.tail_k.shape[1] <= 8 + 3


def _reference_output(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    t: int,
    n_sink: int,
    window: int,
    m: int,
    selected: set[int] | None = None,
) -> torch.Tensor:
    """Query t by hand: sinks + raw c(t)..t, plus mean-pooled blocks with + log m, one softmax."""
    k16, v16 = k.half().float(), v.half().float()
    nb = max(0, (t - window - n_sink) // m)
    c = n_sink + nb * m
    raw = list(range(min(n_sink, t + 1))) + list(range(c, t + 1))
    out = torch.empty(H * G, D)
    for h in range(H):
        keys = [k16[h, i] for i in raw]
        vals = [v16[h, i] for i in raw]
        bias = [0.0] * len(raw)
        for b in range(nb):
            if selected is not None and b not in selected:
                continue
            block = slice(n_sink + b * m, n_sink + (b + 1) * m)
            keys.append(k16[h, block].mean(0).half().float())
            vals.append(v16[h, block].mean(0).half().float())
            bias.append(math.log(m))
        kk, vv = torch.stack(keys), torch.stack(vals)
        for g in range(G):
            logits = kk @ q[h * G + g, t] / math.sqrt(D) + torch.tensor(bias)
            out[h * G + g] = torch.softmax(logits, 0) @ vv
    return out


def test_one_softmax_over_raw_tokens_and_merged_entries() -> None:
    layer = _layer("H", n_sink=2, window=8, hca_ratio=4, storage="f16")
    q, k, v = _qkv(37, seed=1)
    out = _run(layer, q, k, v, chunk=5)
    for t in (9, 20, 36):
        assert torch.allclose(out[:, t], _reference_output(q, k, v, t, 2, 8, 4), atol=1e-3), t


def test_top_k_reads_only_the_best_entry_per_kv_head() -> None:
    layer = _layer("C", n_sink=2, window=8, csa_ratio=4, top_k=1, storage="f16")
    q, k, v = _qkv(40, seed=2)
    out = _run(layer, q, k, v, chunk=40)
    t = 39
    nb = (t - 8 - 2) // 4
    for h in range(H):
        pooled = torch.stack([k[h, 2 + b * 4 : 6 + b * 4].half().float().mean(0).half().float() for b in range(nb)])
        score = (q[h * G : (h + 1) * G, t] @ pooled.T).amax(0)  # best over the KV head's query heads
        best = int(score.argmax())
        ref = _reference_output(q, k, v, t, 2, 8, 4, selected={best})
        assert torch.allclose(out[h * G : (h + 1) * G, t], ref[h * G : (h + 1) * G], atol=1e-3)


@pytest.mark.parametrize(
    "cfg",
    [
        {"window": 1000},  # the window never closes: nothing is ever compressed
        {"window": 4, "csa_read": "raw", "top_k": 10_000, "storage": "f16", "indexer": "quest"},  # every block read raw
    ],
)
def test_equal_to_full_cache_when_compression_is_off(cfg: dict[str, object]) -> None:
    q, k, v = _qkv(60, seed=3)
    ref = _run(FullLayer(MC), q, k, v, chunk=60)
    out = _run(_layer("C", **cfg), q, k, v, chunk=7)
    assert torch.allclose(out, ref, atol=1e-5)


def test_logits_equal_full_cache_when_compression_is_off(tiny_llama: TinyLlama) -> None:
    model = LlamaModel(tiny_llama.path)
    tokens = torch.randint(0, tiny_llama.n_vocab, (70,), generator=torch.Generator().manual_seed(4))
    ref = model.forward(tokens, 0, full_cache(model.config), all_logits=True)
    off = HybridConfig(window=4, csa_read="raw", top_k=10_000, storage="f16", layout_cycle="C")
    out = model.forward(tokens, 0, hybrid_cache(model.config, model.rope, off), all_logits=True)
    assert torch.allclose(out, ref, atol=1e-4)
    on = model.forward(tokens, 0, hybrid_cache(model.config, model.rope, HybridConfig(window=8)), all_logits=True)
    assert not torch.allclose(on, ref, atol=1e-3)  # and the default does compress


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"csa_read": "raw", "indexer": "quest", "csa_ratio": 8, "top_k": 2},
        {"key_pool": "rerope"},
        {"layout_cycle": "W"},
    ],
)
def test_chunked_prefill_equals_token_by_token(cfg: dict[str, object]) -> None:
    base: dict[str, object] = {"n_sink": 2, "window": 8, "csa_ratio": 4, "hca_ratio": 8, "top_k": 2}
    c = HybridConfig(**{**base, **cfg}).validate()  # type: ignore[arg-type]  # a dict of the fields; mypy cannot match **dict to each
    q, k, v = _qkv(50, seed=5)
    outs = []
    for chunk in (1, 6, 50):
        cache = hybrid_cache(MC, ROPE, c)
        outs.append(
            torch.cat(
                [
                    cache.attend(0, q[:, s : s + chunk], k[:, s : s + chunk], v[:, s : s + chunk], s)
                    for s in range(0, 50, chunk)
                ],
                dim=1,
            )
        )
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    assert torch.allclose(outs[0], outs[2], atol=1e-5)


def test_attention_pooling_limits_the_chunk_and_keeps_weights_convex() -> None:
    layer = _layer("H", n_sink=2, window=8, hca_ratio=4, pooling="attn", storage="f16")
    assert layer.max_chunk == 8
    q, k, v = _qkv(30, seed=6)
    _run(layer, q, k, v, chunk=1)
    assert layer.entry_v is not None and isinstance(layer.entry_v, torch.Tensor)
    blocks = v[:, 2 : 2 + 4 * layer.n_entries].half().float().unflatten(1, (layer.n_entries, 4))
    ev = layer.entry_v.float()
    assert torch.all(ev <= blocks.amax(2) + 1e-2) and torch.all(ev >= blocks.amin(2) - 1e-2)


# --- bytes -----------------------------------------------------------------------------------
RAW_TOKEN = H * D * 2 * 2  # K and V, f16
FP8_VEC = H * (D + D // 32)  # one FP8 vector per KV head, with its exponent bytes


def test_bytes_of_each_layer_kind() -> None:
    q, k, v = _qkv(100, seed=7)
    full = FullLayer(MC)
    _run(full, q, k, v, 100)
    assert full.bytes_held() == 100 * RAW_TOKEN

    win = _layer("W", n_sink=4, window=16)
    _run(win, q, k, v, 9)
    assert win.bytes_held() == (4 + 16) * RAW_TOKEN

    csa = _layer("C", n_sink=4, window=16, csa_ratio=4)
    _run(csa, q, k, v, 9)
    n_e = csa.n_entries
    tail = csa.tail_k.shape[1]
    assert n_e == (100 - 16 - 4) // 4 and 4 + tail + 4 * n_e == 100
    assert csa.bytes_held() == (4 + tail) * RAW_TOKEN + n_e * 2 * FP8_VEC  # K and V; the indexer reads the keys

    quest = _layer("C", n_sink=4, window=16, csa_ratio=8, csa_read="raw", indexer="quest")
    _run(quest, q, k, v, 9)
    n_p = quest.n_entries
    raw_fp8 = n_p * 8 * 2 * FP8_VEC  # raw K and V of every page
    assert quest.bytes_held() == (4 + quest.tail_k.shape[1]) * RAW_TOKEN + raw_fp8 + n_p * 2 * FP8_VEC  # + min, max


def test_cache_bytes_add_up_and_window_for_bytes() -> None:
    mc = ModelConfig(**{**MC.__dict__, "n_layer": 4})
    cache = hybrid_cache(mc, ROPE, HybridConfig(n_sink=4, window=16, layout_head="FW", layout_cycle="CH"))
    assert [type(layer).__name__ for layer in cache.layers] == [
        "FullLayer",
        "HybridLayer",
        "HybridLayer",
        "HybridLayer",
    ]
    q, k, v = _qkv(64, seed=8)
    for il in range(4):
        _run(cache.layers[il], q, k, v, 64)
    assert cache.bytes_held() == sum(layer.bytes_held() for layer in cache.layers)
    budget = 10 * mc.f16_kv_bytes_per_token
    w = window_for_bytes(mc, budget, n_sink=4)
    wc = window_cache(mc, ROPE, w, n_sink=4)
    for il in range(4):
        _run(wc.layers[il], q, k, v, 64)
    assert wc.bytes_held() <= budget
    assert mc.f16_kv_bytes_per_token == 4 * RAW_TOKEN


def test_hybrid_bytes_at_matches_a_real_run(tiny_llama: TinyLlama) -> None:
    from vrampilot.hybrid.evaluate import hybrid_bytes_at

    model = LlamaModel(tiny_llama.path)
    cfg = HybridConfig(window=8, hca_ratio=16)
    cache = hybrid_cache(model.config, model.rope, cfg)
    model.forward(torch.randint(0, tiny_llama.n_vocab, (75,)), 0, cache)
    assert hybrid_bytes_at(model, cfg, 75) == cache.bytes_held()


# --- 4-bit storage, reach, and the counted bytes ---------------------------------------------------
def test_q4_window_baseline_is_llama_cpp_q4_0_cut_to_a_window() -> None:
    """Every kept token (sinks too) is stored q4_0 as it arrives, and read back as stored."""
    from vrampilot.hybrid.q4 import quantize_q4

    q, k, v = _qkv(60, seed=9)
    layer = _layer("W", n_sink=2, window=8, window_storage="q4")
    out = _run(layer, q, k, v, chunk=7)
    kq, vq = quantize_q4(k).dequantize(), quantize_q4(v).dequantize()
    t = 59
    keep = [0, 1, *range(t - 8, t + 1)]
    for h in range(H):
        for g in range(G):
            p = torch.softmax(kq[h, keep] @ q[h * G + g, t] / math.sqrt(D), 0)
            assert torch.allclose(out[h * G + g, t], p @ vq[h, keep], atol=1e-5)
    assert layer.bytes_held() == (2 + 8) * 2 * H * (D // 2 + 2 * (D // 32))


def test_reach_keeps_only_the_newest_old_tokens() -> None:
    """Kind R with a reach reads the sinks, its window and `reach` older tokens, and holds no more."""
    from vrampilot.hybrid.layer_plan import RAW_BLOCK

    cfg = HybridConfig(n_sink=2, window=8, storage="f16", layout_cycle="R", reach=RAW_BLOCK)
    plan = LayerPlan.for_kind("R", cfg, cfg.reach)
    layer = HybridLayer(MC, plan, ROPE)
    q, k, v = _qkv(90, seed=10)
    out = _run(layer, q, k, v, chunk=5)
    t = 89
    nb = (t - 8 - 2) // RAW_BLOCK  # blocks closed for this query
    first = max(0, nb - 1)
    keep = [0, 1, *range(2 + first * RAW_BLOCK, t + 1)]
    k16, v16 = k.half().float(), v.half().float()
    for h in range(H):
        p = torch.softmax(k16[h, keep] @ q[h * G, t] / math.sqrt(D), 0)
        assert torch.allclose(out[h * G, t], p @ v16[h, keep], atol=1e-4)
    assert layer.n_entries - layer.first_entry == 1
    assert layer.bytes_held() == plan.kv_bytes(90, D) * H
    # The same run token by token gives the same outputs (eviction follows each query's reach).
    one = _run(HybridLayer(MC, plan, ROPE), q, k, v, chunk=1)
    assert torch.allclose(one, out, atol=1e-5)


def test_rotated_q4_entries_read_like_their_dequantized_values() -> None:
    """Reading rotated entries with rotated queries equals reading the rotated-back values."""
    cfg = HybridConfig(n_sink=2, window=8, layout_cycle="R", storage="q4", rotate=True)
    q, k, v = _qkv(70, seed=11)
    rotated = _run(HybridLayer(MC, LayerPlan.for_kind("R", cfg), ROPE), q, k, v, chunk=9)
    ref = _run(FullLayer(MC), q, k, v, chunk=9)
    assert torch.allclose(rotated, ref, atol=0.25) and not torch.allclose(rotated, ref, atol=1e-3)
    plain = _run(HybridLayer(MC, LayerPlan.for_kind("R", cfg.with_(rotate=False)), ROPE), q, k, v, chunk=9)
    assert not torch.equal(rotated, plain)


@pytest.mark.parametrize("n", [1, 30, 75, 200])
def test_counted_bytes_equal_what_every_named_config_holds(tiny_llama: TinyLlama, n: int) -> None:
    """layer_plan.py's count (what the app shows and the baselines are sized by) is what real caches hold."""
    from vrampilot.hybrid.config import CONFIGS, budget_base

    model = LlamaModel(tiny_llama.path)
    mc = model.config
    tokens = torch.randint(0, tiny_llama.n_vocab, (n,), generator=torch.Generator().manual_seed(n))
    small = {"window": 8, "hca_ratio": 16, "csa_ratio": 4, "n_sink": 2}
    configs = [c.with_(**small) for c in CONFIGS.values()]
    configs += [budget_base().with_(**small, reach=16, head_reach=((0, 1, None), (1, 0, 48)))]
    configs += [HybridConfig(n_sink=2, window=8, layout_cycle="W", window_storage="q4")]
    for cfg in configs:
        cache = hybrid_cache(mc, model.rope, cfg)
        model.forward(tokens, 0, cache)
        assert config_kv_bytes(cfg, mc.cache_shape, n) == cache.bytes_held(), cfg.name


def test_window_for_bytes_fits_both_storages() -> None:
    mc = ModelConfig(**{**MC.__dict__, "n_layer": 2})
    budget = 5000
    for storage in ("f16", "q4"):
        w = window_for_bytes(mc, budget, n_sink=2, storage=storage)
        cfg = HybridConfig(n_sink=2, window=w, layout_cycle="W", window_storage=storage)
        assert (
            config_kv_bytes(cfg, mc.cache_shape, 10_000)
            <= budget
            < config_kv_bytes(cfg.with_(window=w + 1), mc.cache_shape, 10_000)
        )
