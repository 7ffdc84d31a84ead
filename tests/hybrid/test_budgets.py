"""Per-head budgets: the far-mass measurement behind them, and the allocation within a byte budget."""

from __future__ import annotations

import pytest

from vrampilot.hybrid.budgets import allocate_reach

from .conftest import TinyLlama

DIST = (4, 8, 16, 32)


def _bytes(reach: int | None) -> int:
    return 1000 if reach is None else 100 + 10 * reach  # a head keeping everything costs the most


def test_heads_that_read_far_get_the_bytes() -> None:
    lost = [
        [[0.9, 0.9, 0.9, 0.9], [0.0, 0.0, 0.0, 0.0]],  # a retrieval-like head (the needle is far), a local one
        [[0.5, 0.3, 0.1, 0.0], [0.2, 0.1, 0.05, 0.0]],
    ]
    budget = 100 * 4 + 900 + 200
    chosen = allocate_reach(lost, DIST, 4, budget, _bytes)
    by = {(b.layer, b.head): b for b in chosen}
    assert by[(0, 0)].reach is None and by[(0, 0)].lost_mass == 0.0  # it keeps every token
    assert by[(0, 1)].reach == 0  # the local head needs nothing beyond its window
    assert sum(b.kv_bytes for b in chosen) <= budget
    assert by[(1, 0)].reach == 12 and by[(1, 1)].reach == 4  # the best mass per byte within what is left
    assert all(b.kv_bytes == _bytes(b.reach) for b in chosen)
    # More budget never loses more mass in total.
    more = allocate_reach(lost, DIST, 4, 5000, _bytes)
    assert sum(b.lost_mass for b in more) <= sum(b.lost_mass for b in chosen)
    # With bytes for all, nothing is lost, and a head that loses nothing anyway spends nothing.
    ample = {(b.layer, b.head): b for b in allocate_reach(lost, DIST, 4, 4000, _bytes)}
    assert all(b.lost_mass == 0.0 for b in ample.values()) and ample[(0, 1)].reach == 0


def test_a_budget_below_the_shortest_reach_is_refused() -> None:
    with pytest.raises(ValueError, match="over the budget"):
        allocate_reach([[[0.5] * 4]], DIST, 4, 99, _bytes)


def test_distances_shorter_than_the_window_are_not_choices() -> None:
    chosen = allocate_reach([[[0.9, 0.8, 0.7, 0.6]]], DIST, 16, 100 + 10 * 16, _bytes)
    assert chosen[0].reach in (0, 16)  # from the distances 16 and 32 (window 16), not 4 or 8


def test_far_mass_is_the_attention_beyond_each_distance(tiny_llama: TinyLlama) -> None:
    torch = pytest.importorskip("torch")
    from vrampilot.hybrid.cache import AttentionCache, FullLayer
    from vrampilot.hybrid.calibrate import FarMassLayer, far_mass
    from vrampilot.hybrid.model import LlamaModel

    model = LlamaModel(tiny_llama.path)
    mc = model.config
    toks = torch.randint(3, mc.n_vocab, (80,), generator=torch.Generator().manual_seed(3))
    watch = [50, 79]
    layers = [FarMassLayer(mc, watch, 2, DIST) for _ in range(mc.n_layer)]
    out = model.forward(toks, 0, AttentionCache(layers, "far"), all_logits=True)
    ref = model.forward(toks, 0, AttentionCache([FullLayer(mc) for _ in range(mc.n_layer)], "full"), all_logits=True)
    assert torch.equal(out, ref)  # recording does not change the run
    mass = layers[0].mass / layers[0].n_watched  # (n_head, distances)
    assert torch.all(mass[:, :-1] >= mass[:, 1:] - 1e-6)  # further back, less mass
    assert torch.all((mass >= 0) & (mass <= 1))
    # By hand for layer 0, query head 0, distance 8: keys 2 .. t-9 (sinks 0, 1 excluded).
    k = layers[0].k
    assert k is not None
    hidden = model.tok_embd[toks]
    qkv = model._rms_norm(hidden, model.layers[0].attn_norm) @ model.layers[0].w_qkv.T
    q = model.rope.apply(
        qkv[:, : mc.n_head * mc.head_dim].view(80, mc.n_head, mc.head_dim).transpose(0, 1), torch.arange(80)
    )
    expected = 0.0
    for t in watch:
        p = torch.softmax(q[0, t] @ k[0, : t + 1].float().T / mc.head_dim**0.5, dim=-1)
        expected += float(p[2 : t - 8].sum())
    assert abs(float(mass[0, 1]) - expected / len(watch)) < 1e-4
    # far_mass: the best query head of each KV head, averaged over sequences.
    fm = far_mass(model, [(toks.tolist(), watch)], 2, distances=DIST)
    assert fm.shape == (mc.n_layer, mc.n_head_kv, len(DIST))
    assert torch.allclose(fm[0], mass.view(mc.n_head_kv, mc.n_group, -1).amax(1), atol=1e-6)


def test_far_mass_per_watched_position_weights_each_position(tiny_llama: TinyLlama) -> None:
    torch = pytest.importorskip("torch")
    from vrampilot.hybrid.calibrate import far_mass, far_mass_rows, kv_far_mass
    from vrampilot.hybrid.model import LlamaModel

    model = LlamaModel(tiny_llama.path)
    mc = model.config
    toks = torch.randint(3, mc.n_vocab, (80,), generator=torch.Generator().manual_seed(4)).tolist()
    watch = [40, 79]
    rows = far_mass_rows(model, toks, watch, 2, distances=DIST)
    assert rows.shape == (mc.n_layer, mc.n_head, 2, len(DIST))
    # Uniform weights are far_mass's mean; weights (1, 0) keep the first position alone, which is
    # what the sequence cut after it measures.
    assert torch.allclose(
        kv_far_mass(rows, mc.n_head_kv), far_mass(model, [(toks, watch)], 2, distances=DIST), atol=1e-6
    )
    first = kv_far_mass(rows, mc.n_head_kv, [1.0, 0.0])
    alone = far_mass(model, [(toks[:41], [40])], 2, distances=DIST)
    assert torch.allclose(first, alone, atol=1e-5)
    assert not torch.allclose(first, kv_far_mass(rows, mc.n_head_kv, [0.0, 1.0]))
    with pytest.raises(ValueError, match="3 weights for 2"):
        kv_far_mass(rows, mc.n_head_kv, [0.2, 0.3, 0.5])
