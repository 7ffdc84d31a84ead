"""Per-KV-head kinds (retrieval heads), kind R, and the retrieval-head calibration: masks, exactness
against the full cache, byte accounting, on short synthetic inputs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

from vrampilot.errors import UserError
from vrampilot.hybrid.cache import (
    RAW_BLOCK,
    FullLayer,
    HybridLayer,
    LayerPlan,
    MixedLayer,
    full_cache,
    hybrid_cache,
)
from vrampilot.hybrid.calibrate import Calibration, CalibrationCase, RecordingLayer, calibrate
from vrampilot.hybrid.config import CONFIGS, HybridConfig
from vrampilot.hybrid.model import LlamaModel

from .conftest import TinyLlama
from .test_cache import FP8_VEC, MC, RAW_TOKEN, ROPE, D, G, H, _qkv, _run

MC3 = replace(MC, n_head_kv=3, n_head=3 * G, n_embd=3 * G * D)  # three KV heads, to mix kinds within a layer


def _qkv3(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(3 * G, n, D, generator=g), torch.randn(3, n, D, generator=g), torch.randn(3, n, D, generator=g))


def _heads(x: torch.Tensor, kv_heads: list[int], per: int) -> torch.Tensor:
    return x[[h * per + j for h in kv_heads for j in range(per)]]


# --- config ------------------------------------------------------------------------------------
def test_head_kinds_override_the_layer_kind() -> None:
    cfg = HybridConfig(layout_cycle="H", retrieval_heads=((1, 2), (0, 0)), retrieval_kind="R").validate()
    assert cfg.head_kinds(3, 3) == (("R", "H", "H"), ("H", "H", "R"), ("H", "H", "H"))
    with pytest.raises(UserError, match="outside the model"):
        cfg.head_kinds(1, 3)
    with pytest.raises(UserError, match="distinct"):
        HybridConfig(retrieval_heads=((1, 2), (1, 2))).validate()
    with pytest.raises(UserError, match="unknown layer kind"):
        HybridConfig(retrieval_kind="X").validate()  # type: ignore[arg-type]  # a bad value on purpose: validate() must refuse it


def test_calibrated_heads_apply_only_to_their_model() -> None:
    cfg = HybridConfig(layout_cycle="H", retrieval_heads=((0, 1),), retrieval_model=(2, 6, 3, 32, 16)).validate()
    assert cfg.head_kinds(2, 3, (2, 6, 3, 32, 16))[0] == ("H", "F", "H")
    assert cfg.head_kinds(2, 3, (2, 6, 3, 32, 99)) == (("H",) * 3,) * 2  # another model: layer kinds only
    # The shipped configs name heads that exist in the model they were calibrated on.
    for c in CONFIGS.values():
        if c.retrieval_heads:
            n_layer, _, n_head_kv, _, _ = c.retrieval_model
            assert sum(
                k == c.retrieval_kind for row in c.head_kinds(n_layer, n_head_kv, c.retrieval_model) for k in row
            ) == len(c.retrieval_heads)
            assert list(c.retrieval_heads) == sorted(c.retrieval_heads)


# --- mixed layers ------------------------------------------------------------------------------
def test_mixed_layer_equals_its_parts_run_alone() -> None:
    """Heads never mix: a full head gives the full cache's output exactly, the others what an
    all-H layer gives for them."""
    cfg = HybridConfig(n_sink=2, window=8, hca_ratio=4, layout_cycle="H", retrieval_heads=((0, 1),)).validate()
    cache = hybrid_cache(replace(MC3, n_layer=1), ROPE, cfg)
    layer = cache.layers[0]
    assert isinstance(layer, MixedLayer)
    q, k, v = _qkv3(45, seed=11)
    out = _run(layer, q, k, v, chunk=7)
    full = _run(FullLayer(MC3), q, k, v, chunk=7)
    only_h = _run(HybridLayer(MC3, LayerPlan.for_kind("H", cfg), ROPE), q, k, v, chunk=7)
    assert torch.allclose(_heads(out, [1], G), _heads(full, [1], G), atol=1e-6)
    assert torch.allclose(_heads(out, [0, 2], G), _heads(only_h, [0, 2], G), atol=1e-6)
    assert not torch.allclose(_heads(out, [0, 2], G), _heads(full, [0, 2], G), atol=1e-3)  # those do compress


def test_mixed_layer_bytes_are_the_sum_of_its_heads() -> None:
    cfg = HybridConfig(n_sink=4, window=16, hca_ratio=8, layout_cycle="W", retrieval_heads=((0, 0), (0, 2))).validate()
    layer = hybrid_cache(replace(MC3, n_layer=1), ROPE, cfg).layers[0]
    q, k, v = _qkv3(100, seed=12)
    _run(layer, q, k, v, chunk=9)
    per_head_token = RAW_TOKEN // H
    assert layer.bytes_held() == 2 * 100 * per_head_token + (4 + 16) * per_head_token


def test_chunked_prefill_equals_token_by_token_with_mixed_heads() -> None:
    cfg = HybridConfig(
        n_sink=2,
        window=8,
        hca_ratio=8,
        csa_ratio=4,
        top_k=2,
        layout_cycle="CH",
        retrieval_heads=((0, 2), (1, 0)),
        retrieval_kind="R",
    ).validate()
    mc = replace(MC3, n_layer=2)
    q, k, v = _qkv3(50, seed=13)
    outs = []
    for chunk in (1, 6, 50):
        cache = hybrid_cache(mc, ROPE, cfg)
        outs.append(
            torch.cat(
                [
                    cache.attend(il, q[:, s : s + chunk], k[:, s : s + chunk], v[:, s : s + chunk], s)
                    for s in range(0, 50, chunk)
                    for il in range(2)
                ][1::2],
                dim=1,
            )
        )
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    assert torch.allclose(outs[0], outs[2], atol=1e-5)


def test_logits_equal_full_cache_when_every_head_is_a_retrieval_head(tiny_llama: TinyLlama) -> None:
    model = LlamaModel(tiny_llama.path)
    mc = model.config
    tokens = torch.randint(0, tiny_llama.n_vocab, (60,), generator=torch.Generator().manual_seed(14))
    ref = model.forward(tokens, 0, full_cache(mc), all_logits=True)
    every = tuple((il, h) for il in range(mc.n_layer) for h in range(mc.n_head_kv))
    cfg = HybridConfig(
        window=4, hca_ratio=8, layout_cycle="H", retrieval_heads=every, retrieval_model=mc.shape
    ).validate()
    assert torch.equal(model.forward(tokens, 0, hybrid_cache(mc, model.rope, cfg), all_logits=True), ref)
    some = replace(cfg, retrieval_heads=every[:1])
    cache = hybrid_cache(mc, model.rope, some)
    out = model.forward(tokens, 0, cache, all_logits=True)
    assert isinstance(cache.layers[0], MixedLayer) and not torch.allclose(out, ref, atol=1e-3)
    from vrampilot.hybrid.evaluate import hybrid_bytes_at

    assert hybrid_bytes_at(model, some, 60) == cache.bytes_held()


# --- kind R --------------------------------------------------------------------------------------
def test_kind_r_reads_every_token_and_equals_full_cache_in_f16() -> None:
    q, k, v = _qkv(70, seed=15)
    ref = _run(FullLayer(MC), q, k, v, chunk=70)
    plan = LayerPlan.for_kind("R", HybridConfig(n_sink=2, window=8))
    assert plan.top_k is None and plan.read_raw and plan.block == RAW_BLOCK
    exact = HybridLayer(MC, replace(plan, storage="f16"), ROPE)
    assert torch.allclose(_run(exact, q, k, v, chunk=9), ref, atol=1e-5)
    fp8 = HybridLayer(MC, plan, ROPE)
    out = _run(fp8, q, k, v, chunk=9)
    assert torch.allclose(out, ref, atol=0.1) and not torch.equal(out, ref)
    # Bytes: sinks and the raw tail in f16, every older token in FP8, no indexer summaries.
    assert fp8.index_a is None and fp8.index_b is None
    n_fp8 = fp8.n_entries * RAW_BLOCK
    assert 2 + fp8.tail_k.shape[1] + n_fp8 == 70 and 8 <= fp8.tail_k.shape[1] < 8 + RAW_BLOCK
    assert fp8.bytes_held() == (2 + fp8.tail_k.shape[1]) * RAW_TOKEN + n_fp8 * 2 * FP8_VEC


# --- calibration ---------------------------------------------------------------------------------
def test_recording_layer_is_the_full_cache_and_measures_attention_mass() -> None:
    q, k, v = _qkv(30, seed=16)
    watch, targets = [20, 29], [3, 4, 25]
    rec = RecordingLayer(MC, watch, targets)
    assert torch.equal(_run(rec, q, k, v, chunk=8), _run(FullLayer(MC), q, k, v, chunk=8))
    k16 = k.half().float().repeat_interleave(G, dim=0)
    expected = torch.zeros(H * G)
    for t in watch:
        p = torch.softmax(torch.einsum("hd,htd->ht", q[:, t], k16[:, : t + 1]) / D**0.5, dim=-1)  # (n_head, t+1)
        expected += p[:, [x for x in targets if x <= t]].sum(-1)
    assert torch.allclose(rec.mass, expected, atol=1e-5)


def test_calibrate_scores_and_ranking(tiny_llama: TinyLlama) -> None:
    model = LlamaModel(tiny_llama.path)
    toks = torch.randint(3, tiny_llama.n_vocab, (40,), generator=torch.Generator().manual_seed(17)).tolist()
    case = CalibrationCase(tokens=toks, needle=[5, 6, 7], answer_queries=[35, 36, 37], key="123", length=40, depth=0.1)
    cal = calibrate(model, [case, case], chunk=16)
    mc = model.config
    assert cal.q_scores.shape == (mc.n_layer, mc.n_head) and len(cal.correct) == 2
    assert torch.all((cal.q_scores >= 0) & (cal.q_scores <= 1))
    assert torch.equal(cal.kv_scores, cal.q_scores.view(mc.n_layer, mc.n_head_kv, -1).amax(-1))
    ranking = cal.ranking()
    assert [s for _, _, s in ranking] == sorted((s for _, _, s in ranking), reverse=True)
    assert cal.top(2) == tuple(sorted((il, h) for il, h, _ in ranking[:2]))
    fixed = Calibration(2, 2, 2, torch.tensor([[0.1, 0.9, 0.0, 0.2], [0.3, 0.3, 0.5, 0.0]]))
    assert fixed.top(2) == ((0, 0), (1, 1))


def test_answer_margins_are_the_teacher_forced_logit_gaps(tiny_llama: TinyLlama) -> None:
    # bench/hybrid_calibrate.py --select ranks allocations by these margins: the logit of each
    # answer token minus the best other one, after the prompt and the answer so far.
    from vrampilot.hybrid.calibrate import AnswerMargins, answer_margins, selection_score

    model = LlamaModel(tiny_llama.path)
    toks = torch.randint(3, tiny_llama.n_vocab, (40,), generator=torch.Generator().manual_seed(5)).tolist()
    case = CalibrationCase(tokens=toks, needle=[5, 6, 7], answer_queries=[36, 37, 38], key="12", length=40, depth=0.1)
    got = answer_margins(model, full_cache(model.config), case, chunk=16)
    hidden = model.forward_hidden(torch.tensor(toks), 0, full_cache(model.config))
    logits = model.logits(hidden[36:39]).float()
    for m, row, target in zip(got.margins, logits, toks[37:40], strict=True):
        others = torch.cat([row[:target], row[target + 1 :]])
        assert m == pytest.approx(float(row[target] - others.max()), abs=1e-3)
    assert got.first == got.margins[0] and got.correct == all(m > 0 for m in got.margins)
    right, wrong = AnswerMargins((0.5, 2.0)), AnswerMargins((-0.1, 3.0))
    assert right.correct and not wrong.correct
    # Keys answered first; among equals, the thinner margins lose.
    keys, margin = selection_score([right, wrong])
    assert keys == 1 and margin == pytest.approx(0.2)
    assert selection_score([right, right]) > selection_score([right, wrong]) > selection_score([wrong, wrong])


def test_calibration_prompts_are_not_the_evaluation_prompts(embedded_model: Path) -> None:
    from vrampilot.hybrid.calibrate import CAL_LENGTHS, calibration_cases
    from vrampilot.hybrid.evaluate import Tokenizer, passkey_prompt

    tok = Tokenizer(embedded_model)
    cases = calibration_cases(tok.encode, per_length=2)
    assert [c.length for c in cases] == [n for n in CAL_LENGTHS for _ in range(2)]
    for c in cases:
        assert len(c.tokens) <= c.length
        needle = tok.decode([c.tokens[i] for i in c.needle])
        assert needle.count(c.key) == 2 and "secret number" in needle
        # The queries are the positions right before each token of the answer at the end.
        assert [c.tokens[i + 1] for i in c.answer_queries] == c.tokens[-len(c.key) - 1 :]
        assert tok.decode(c.tokens[-len(c.key) - 1 :]) == f" {c.key}"
        evaluation = passkey_prompt(tok, c.length, c.depth, c.key)
        assert tok.decode(evaluation[:30]) != tok.decode(c.tokens[:30])


def test_spread_calibration_prompts_put_one_needle_in_each_bin_of_depth() -> None:
    # bench/hybrid_calibrate.py --budgets --spread: needles at every distance a window might end at.
    from vrampilot.hybrid.calibrate import BUDGET_SEED, calibration_cases

    def encode(text: str) -> list[int]:  # one token per character: the key is found twice in the needle
        return [ord(ch) for ch in text]

    n = 6
    cases = calibration_cases(encode, lengths=(3000,), per_length=n, seed=BUDGET_SEED, spread=True)
    bins = [int((c.depth - 0.05) / 0.9 * n) for c in cases]
    assert bins == list(range(n))
    backs = [c.answer_queries[0] - c.needle[0] for c in cases]
    assert backs == sorted(backs, reverse=True) and backs[0] > 2000 and backs[-1] < 800


def test_the_development_text_shares_no_passage_with_the_evaluation_text() -> None:
    # Budgets are calibrated on the development text, so not one 12-word run of it may be in the
    # evaluation text.
    from vrampilot.hybrid.config import default_text_path, dev_text_path

    evaluation = default_text_path()
    assert evaluation is not None

    def runs(path: Path) -> set[str]:
        words = path.read_text(encoding="utf-8").split()
        return {" ".join(words[i : i + 12]) for i in range(len(words) - 11)}

    dev = runs(dev_text_path())
    assert len(dev) > 10_000 and not dev & runs(evaluation)


# --- evaluation protocol ---------------------------------------------------------------------------
@pytest.mark.slow  # the embedded model, 12 short passkey runs: about 30 s on a free core
def test_passkey_trials_add_keys_per_depth_and_keep_the_first_cases(embedded_model: Path) -> None:
    from vrampilot.hybrid.evaluate import Tokenizer, passkey

    model = LlamaModel(embedded_model)
    tok = Tokenizer(embedded_model)
    methods = {"full": lambda n: full_cache(model.config)}
    one = passkey(model, tok, [64], methods, depths=[0.0, 1.0])
    two = passkey(model, tok, [64], methods, depths=[0.0, 1.0], trials=2)
    assert [(c["length"], c["depth"]) for c in two] == [(64, 0.0), (64, 0.0), (64, 1.0), (64, 1.0)]
    assert one[0]["key"] == two[0]["key"] and len({c["key"] for c in two}) == 4
    # The cases of one depth read their shared prefix once; each answers as it would alone.
    from vrampilot.hybrid.evaluate import greedy, passkey_prompt

    for c in two:
        alone = tok.decode(
            list(greedy(model, full_cache(model.config), passkey_prompt(tok, 64, c["depth"], c["key"]), 8))
        )
        assert alone == c["full_text"]
    # A stopped run's cases are kept and the rest run: the same cases as one run, in the same order.
    seen: list[list[dict[str, object]]] = []
    resumed = passkey(model, tok, [64], methods, depths=[0.0, 1.0], trials=2, done=two[:1], on_cases=seen.append)
    assert resumed == two and len(seen) == 3 and seen[0][0] is two[0]
    # One key at every depth first: the first case run after the kept one is the other depth's.
    assert [(c["depth"], c["key"]) for c in seen[0][1:]] == [(1.0, two[2]["key"])]
