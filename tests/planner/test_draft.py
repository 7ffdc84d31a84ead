"""Speculative decoding in the plan: the draft's bytes against llama-server's own buffer lines for
the draft it loads, the verify batch's logit rows, llama.cpp's vocabulary rule asked before load,
and the speed-up arithmetic."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from testkit.gguf_models import write_model
from testkit.machines import cpu_machine
from testkit.spec_server import serving
from vrampilot.export import llama_server_argv
from vrampilot.gguf import load_model_spec
from vrampilot.llamacpp import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, read_vocab, vocab_mismatch
from vrampilot.planner.dry_run.log_lines import matches_print
from vrampilot.planner.errors import PlanError
from vrampilot.planner.memory.breakdown import Components
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.draft import (
    DraftRequest,
    best_n_draft,
    draft_settings,
    learn_acceptance,
    plan_with_draft,
    predicted_speedup,
    prior_acceptance,
    replan_keeping_draft,
    stored_acceptance,
    tokens_per_step,
)
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import load_acceptance, p_from_rate, pair_key, record_acceptance
from vrampilot.units import GIB

PINS = Pins(n_ctx=1024, n_threads=1, n_threads_batch=1)


def test_without_drafting_the_settings_and_their_json_stay_as_they_were() -> None:
    s = Settings(n_ctx=4096)
    assert not s.drafting and s.n_outputs_max == 1
    assert not any(k.startswith(("draft", "spec")) for k in s.to_dict())
    # A draft length without a kind, or a kind without a length, drafts nothing either.
    assert not s.with_(draft_n_max=4).drafting and not s.with_(spec_type="ngram").drafting


def test_the_verify_batch_reserves_a_logit_row_per_drafted_token_up_to_the_batch() -> None:
    s = Settings(n_ctx=4096, spec_type="draft", draft_model="d.gguf", draft_n_max=4)
    assert s.n_outputs_max == 5
    assert s.with_(n_seq=2).n_outputs_max == 10
    assert s.with_(draft_n_max=100, n_batch=64).n_outputs_max == 64
    assert {"spec_type", "draft_n_max", "draft_model"} <= set(s.to_dict())


def test_the_draft_context_copies_the_targets_but_its_own_cache_types_layers_and_device() -> None:
    s = Settings(
        n_ctx=8192,
        n_ubatch=256,
        flash_attn=False,
        n_gpu_layers=99,
        devices=("Vulkan0",),
        spec_type="draft",
        draft_model="d.gguf",
        draft_n_max=6,
        draft_gpu_layers=31,
        draft_device="Vulkan1",
        draft_type_k="q8_0",
        draft_type_v="q8_0",
    )
    d = draft_settings(s)
    assert (d.n_ctx, d.n_ubatch, d.flash_attn) == (8192, 256, False)
    assert (d.type_k, d.type_v, d.n_gpu_layers, d.devices) == ("q8_0", "q8_0", 31, ("Vulkan1",))
    assert d.n_outputs_max == 1 and not d.drafting  # one logit row per sequence (n_outputs_max_per_seq = 1)
    cpu = draft_settings(s.with_(draft_device="none"))
    assert cpu.n_gpu_layers == 0 and cpu.devices == ()


def test_the_exported_line_names_llama_cpps_spec_flags() -> None:
    s = Settings(
        n_ctx=2048,
        spec_type="draft",
        draft_model="/m/d.gguf",
        draft_n_max=5,
        draft_n_min=1,
        draft_gpu_layers=0,
        draft_device="none",
        draft_type_k="q8_0",
        draft_type_v="f16",
    )
    argv = llama_server_argv("/m/t.gguf", s)
    tail = argv[argv.index("-md") :]
    for flag, value in (
        ("-md", "/m/d.gguf"),
        ("--spec-type", "draft-simple"),
        ("--spec-draft-n-max", "5"),
        ("--spec-draft-n-min", "1"),
        ("-ngld", "0"),
        ("-ctkd", "q8_0"),
        ("-ctvd", "f16"),
        ("-devd", "none"),
    ):
        assert tail[tail.index(flag) + 1] == value
    ngram = llama_server_argv("/m/t.gguf", Settings(n_ctx=2048, spec_type="ngram", draft_n_max=8))
    assert ngram[ngram.index("--spec-type") + 1] == "ngram-simple"
    assert ngram[ngram.index("--spec-ngram-simple-size-m") + 1] == "8"
    assert "-md" not in ngram
    assert "--spec-type" not in llama_server_argv("/m/t.gguf", Settings(n_ctx=2048))


def test_speedup_arithmetic() -> None:
    assert tokens_per_step(1.0, 4) == 5 and tokens_per_step(0.0, 4) == 1
    # A free draft that is always right, verified at the cost of one step: n + 1 tokens a step.
    assert predicted_speedup(1.0, 4, 0.1, 0.0, 0.1) == pytest.approx(5.0)
    # A draft as slow as the target (a model drafting for itself) gains nothing even when always
    # right, and loses once the verify pass costs more than one step.
    assert predicted_speedup(1.0, 4, 0.1, 0.1, 0.1) == pytest.approx(1.0)
    assert predicted_speedup(1.0, 4, 0.1, 0.1, 0.2) < 1.0
    # A cheap, good draft drafts more than a cheap, poor one.
    verify = lambda n: 0.1 + 0.002 * n  # noqa: E731 - a memory-bound verify pass
    assert best_n_draft(0.9, 0.1, 0.005, verify) > best_n_draft(0.3, 0.1, 0.005, verify)
    for n in (1, 3, 8):
        for p in (0.1, 0.5, 0.9):
            share = sum(p**i for i in range(1, n + 1)) / n
            assert p_from_rate(share, n) == pytest.approx(p, abs=1e-6)


def test_acceptance_is_the_prior_until_a_reply_teaches_it(tmp_path: Path) -> None:
    request = DraftRequest("draft", Path("/m/draft.gguf"))
    key = pair_key("/m/target.gguf", "/m/draft.gguf")
    assert load_acceptance(key, tmp_path) is None  # nothing measured: the record has no figure
    assert stored_acceptance("/m/target.gguf", request, tmp_path) == prior_acceptance("draft")
    assert not prior_acceptance("draft").measured
    assert record_acceptance(key, 4, 0, 0, tmp_path) is None  # a reply that drafted nothing teaches nothing
    learned = record_acceptance(key, 4, 40, 40, tmp_path)
    assert learned is not None and learned.measured and learned.p > 0.99
    record_acceptance(key, 4, 40, 0, tmp_path)
    both = load_acceptance(key, tmp_path)
    assert both is not None and both.replies == 2 and both.drafted_tokens == 80 and 0.4 < both.p < 0.6
    assert stored_acceptance("/m/target.gguf", request, tmp_path) == both
    assert load_acceptance(pair_key("/m/target.gguf", "ngram"), tmp_path) is None
    (tmp_path / "draft-acceptance.json").write_text("{not json")
    assert stored_acceptance("/m/target.gguf", request, tmp_path) == prior_acceptance("draft")  # damaged: the prior


def test_llama_cpps_vocabulary_rule(embedded_model: Path) -> None:
    real = read_vocab(embedded_model)
    assert vocab_mismatch(real, real) is None
    grown = replace(real, texts=real.texts + tuple(b"x%d" % i for i in range(SPEC_VOCAB_MAX_SIZE_DIFFERENCE)))
    assert vocab_mismatch(real, grown) is None  # llama.cpp allows up to 128 more or fewer tokens
    too_many = replace(grown, texts=(*grown.texts, b"one more"))
    assert "vocabulary has 49,281 tokens" in (vocab_mismatch(real, too_many) or "")
    renamed = replace(real, texts=(*real.texts[:100], b"other", *real.texts[101:]))
    assert "token 100 differs" in (vocab_mismatch(real, renamed) or "")
    first_five = replace(real, texts=(b"other", *real.texts[1:]))
    assert vocab_mismatch(real, first_five) is None  # llama.cpp compares from token 5
    assert "start token" in (vocab_mismatch(real, replace(real, add_bos=True)) or "")
    assert "end token" in (vocab_mismatch(real, replace(real, add_eos=True, eos=7)) or "")
    assert "tokenizer is SentencePiece" in (vocab_mismatch(real, replace(real, vocab_type=1)) or "")


def test_a_draft_of_another_vocabulary_is_refused_before_load(embedded_model: Path, tmp_path: Path) -> None:
    other = write_model(tmp_path / "other-vocab.gguf", "llama")  # no tokenizer of its own
    with pytest.raises(
        PlanError, match=r"other-vocab.gguf cannot draft for SmolLM2.*tokenizer is none, the model's is BPE"
    ):
        plan_with_draft(
            load_model_spec(embedded_model),
            resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
            PINS,
            DraftRequest("draft", other),
        )
    with pytest.raises(PlanError, match=r"draft model: .*missing\.gguf"):
        plan_with_draft(
            load_model_spec(embedded_model),
            resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
            PINS,
            DraftRequest("draft", tmp_path / "missing.gguf"),
        )


def test_the_plan_says_the_acceptance_is_assumed_until_measured(embedded_model: Path) -> None:
    spec, target = load_model_spec(embedded_model), resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    p = plan_with_draft(spec, target, PINS, DraftRequest("ngram"))
    assert p.draft is not None and p.draft.kind == "ngram" and p.draft.memory is None
    assert p.settings.spec_type == "ngram" and p.settings.draft_n_max >= 4
    assert any("assumed until replies measure it" in r for r in p.reasons)
    measured = plan_with_draft(
        spec, target, PINS, DraftRequest("ngram"), acceptance=replace(prior_acceptance("ngram"), p=0.95, replies=3)
    )
    assert measured.draft is not None and any("measured over 3 replies here" in r for r in measured.reasons)
    # A better acceptance drafts at least as far and predicts more.
    assert measured.draft.speedup > p.draft.speedup
    assert measured.settings.draft_n_max >= p.settings.draft_n_max


def _assert_host_matches(predicted: Components, buffers: dict[str, dict[str, int]], what: str) -> None:
    assert set(buffers["kv"]) == {"CPU"} and set(buffers["compute"]) == {"CPU"}, buffers
    pairs = (
        ("weights", predicted.weights_bytes, sum(buffers["model"].values())),
        ("kv", predicted.kv_bytes, buffers["kv"]["CPU"]),
        ("compute", predicted.compute_bytes, buffers["compute"]["CPU"]),
        ("output", predicted.output_bytes, sum(buffers["output"].values())),
    )
    for name, pred, real in pairs:
        assert matches_print(pred, real), f"{what} {name}: predicted {pred}, llama-server {real}"


@pytest.mark.slow
@pytest.mark.parametrize("draft_kv", ["f16", "q8_0"])
def test_draft_bytes_equal_llama_servers_for_the_draft_it_loads(embedded_model: Path, draft_kv: str) -> None:
    """The embedded model drafting for itself on the CPU (the control): llama-server's buffer lines
    for the target and for the draft, each against the plan's."""
    spec, target = load_model_spec(embedded_model), resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    p = plan_with_draft(
        spec,
        target,
        PINS,
        DraftRequest("draft", embedded_model, n_draft=4, type_k=draft_kv, type_v=draft_kv),
        exact=True,
    )
    assert p.draft is not None and p.draft.memory is not None and p.settings.n_outputs_max == 5
    with serving(embedded_model, p.settings) as served:
        target_buffers, draft_buffers = served.buffers()
        _assert_host_matches(p.memory.host, target_buffers, "target")
        _assert_host_matches(p.draft.memory.host, draft_buffers, "draft")
        timings = served.complete("1, 2, 3, 4, 5, 6, 7, 8,", 24)["timings"]
    # The draft really drafted, and the greedy draft of the same model is always right.
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
    assert p.draft.bytes_by_device() == {"CPU": p.draft.memory.host.total_bytes}


@pytest.mark.slow
def test_the_embedded_model_drafts_for_another_model_of_its_tokenizer(embedded_model: Path, tmp_path: Path) -> None:
    big = write_model(tmp_path / "target.gguf", "llama", tokenizer="smollm2", n_layer=6, n_embd=256, n_ff=704)
    p = plan_with_draft(
        load_model_spec(big),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        PINS,
        DraftRequest("draft", embedded_model),
        exact=True,
    )
    assert p.draft is not None and p.draft.memory is not None and p.draft.spec is not None
    assert 1 <= p.settings.draft_n_max <= 16
    with serving(big, p.settings) as served:
        target_buffers, draft_buffers = served.buffers()
        _assert_host_matches(p.memory.host, target_buffers, "target")
        _assert_host_matches(p.draft.memory.host, draft_buffers, "draft")
        timings = served.complete("The capital of France is", 16)["timings"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]


@pytest.mark.slow
def test_ngram_drafting_drafts_on_a_repetitive_prompt(embedded_model: Path) -> None:
    p = plan_with_draft(
        load_model_spec(embedded_model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        PINS,
        DraftRequest("ngram", n_draft=8),
        exact=True,
    )
    with serving(embedded_model, p.settings) as served:
        target_buffers, draft_buffers = served.buffers()
        assert draft_buffers["model"] == {}  # nothing loaded for it
        _assert_host_matches(p.memory.host, target_buffers, "target")
        timings = served.complete("red green blue, red green blue, red green blue, red green blue, red", 32)["timings"]
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0


def test_a_replys_speed_corrects_the_predicted_speedup(embedded_model: Path, tmp_path: Path) -> None:
    spec, target = load_model_spec(embedded_model), resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    request = DraftRequest("ngram", n_draft=6)
    p = plan_with_draft(spec, target, PINS, request)
    d = p.draft
    assert d is not None and d.acceptance.speed_factor == 1.0
    # A reply that accepted every draft and decoded at half what the arithmetic says for that.
    full = predicted_speedup(1.0, 6, d.t_target_s, d.t_draft_s, d.t_verify_s) / d.t_target_s
    learned = learn_acceptance(p, 60, 60, tmp_path, decode_tps=full / 2)
    assert learned is not None and learned.speed_factor == pytest.approx(0.5, rel=1e-3)
    stored = stored_acceptance(spec.path, request, tmp_path)
    assert stored.measured and stored.p > 0.99 and stored.speed_factor == pytest.approx(0.5, rel=1e-3)
    again = plan_with_draft(spec, target, PINS, request, acceptance=stored)
    assert again.draft is not None
    assert again.draft.speedup == pytest.approx(full * d.t_target_s * 0.5, rel=1e-3)
    assert any("speed corrected by 0.50" in r for r in again.reasons)


def test_the_drafts_bytes_are_set_aside_on_its_device_before_the_model_is_planned(embedded_model: Path) -> None:
    """A GPU whose budget the model alone would fill with context: with the draft beside it, the
    model gets a shorter context, and model plus draft stay within the device's budget."""
    spec = load_model_spec(embedded_model)
    target = resolve_target(
        TargetRequest(vram_bytes=int(1.45 * GIB)), cpu_machine()
    )  # the model alone: its full 8K context
    pins = Pins(n_ctx=None, n_threads=1, n_threads_batch=1)
    alone = plan_with_draft(spec, target, pins, DraftRequest("ngram"))
    drafted = plan_with_draft(spec, target, pins, DraftRequest("draft", embedded_model, on_gpu=True))
    d = drafted.draft
    assert d is not None and d.memory is not None and d.memory.per_device
    assert drafted.settings.draft_gpu_layers == spec.n_layer + 1 and drafted.fits
    on_device = drafted.memory.per_device[0].total_bytes + d.memory.per_device[0].total_bytes
    on_device -= d.memory.per_device[0].margin_bytes
    assert on_device <= target.gpus[0].memory_budget_bytes
    assert list(d.bytes_by_device()) == ["CPU", target.gpus[0].buffer_name or target.gpus[0].name]
    # The model's plan alone and the draft beside it would not fit: the set-aside is what makes room.
    draft_on_device = d.bytes_by_device()[target.gpus[0].buffer_name or target.gpus[0].name]
    assert alone.fits and alone.memory.per_device[0].total_bytes + draft_on_device > target.gpus[0].memory_budget_bytes
    assert drafted.memory.per_device[0].kv_bytes < alone.memory.per_device[0].kv_bytes  # the room went to the draft
    # Kept on the CPU instead, the draft leaves the device to the model and says so to llama-server.
    on_cpu = plan_with_draft(spec, target, pins, DraftRequest("draft", embedded_model, on_gpu=False))
    assert on_cpu.settings.draft_gpu_layers == 0 and on_cpu.settings.draft_device == "none"
    assert on_cpu.draft is not None and list(on_cpu.draft.bytes_by_device()) == ["CPU"]


def test_a_replan_and_a_back_off_keep_drafting(embedded_model: Path) -> None:
    from vrampilot.engine import next_backoff

    spec, target = load_model_spec(embedded_model), resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    p = plan_with_draft(
        spec, target, PINS, DraftRequest("draft", embedded_model, n_draft=3, type_k="q8_0", type_v="q8_0")
    )
    smaller = replan_keeping_draft(p, n_ctx=512)
    assert smaller.settings.n_ctx == 512 and smaller.draft is not None
    kept = ("spec_type", "draft_model", "draft_n_max", "draft_type_k", "draft_type_v")
    assert all(getattr(smaller.settings, k) == getattr(p.settings, k) for k in kept)
    step = next_backoff(replan_keeping_draft(p, n_ctx=4096))  # offers a smaller context
    assert step is not None and step.plan.settings.drafting and step.plan.settings.draft_model == str(embedded_model)
    assert replan_keeping_draft(plan_with_draft(spec, target, PINS, DraftRequest("ngram")), n_ctx=512).draft is not None
