"""What the whole graph costs beyond its kernels, learned from the probe's run of the built-in model:
the fit recovers the factors a run was made with, for generating and for prompts, bounds a
disturbed run, and every prediction then applies them, to the weights and to the attention
separately. Runs here are data values built from the speed model's
own prediction times known factors, so each test knows the answer; one test takes the real run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from testkit.machines import measured_target, uniform_probe
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.speed_model.cpu_speed import (
    CpuRates,
    GraphFactors,
    attention_shapes,
    decode_seconds,
    prefill_seconds,
    weight_table,
)
from vrampilot.planner.speed_model.graph_factors import (
    BEST_CASE_MIN,
    FACTOR_MAX,
    factors_for_model,
    factors_for_run,
    graph_factors,
    with_reference_types,
)
from vrampilot.planner.speed_model.predict import SpeedModel
from vrampilot.planner.target import TargetRequest
from vrampilot.speed import (
    HostProbe,
    RateAt,
    ReferenceDecode,
    ReferencePrefill,
    ReferenceRun,
    decode_record,
    encode_record,
    probe_outdated,
)

N_CTX, UBATCH = 1280, 256


@pytest.fixture(scope="module")
def spec(embedded_model: Path) -> ModelSpec:
    return load_model_spec(embedded_model)


def _constant(
    decode: tuple[float, float], prefill: tuple[float, float], threads: tuple[int, ...] = (1, 2)
) -> GraphFactors:
    def at(v: float) -> tuple[RateAt, ...]:
        return tuple(RateAt(t, v) for t in threads)

    return GraphFactors(at(decode[0]), at(decode[1]), at(prefill[0]), at(prefill[1]))


def _run(spec: ModelSpec, embedded: Path, probe: HostProbe, made_with: GraphFactors) -> ReferenceRun:
    """A reference run whose steps took exactly what the speed model predicts with `made_with`."""
    rates = CpuRates(probe, 2, graph=made_with)
    table, on = weight_table(spec), tuple(True for _ in range(spec.n_layer))
    att = attention_shapes(spec, lambda il: N_CTX)
    decode = tuple(
        ReferenceDecode(t, depth, decode_seconds(table, on, True, att, depth, "f16", t, rates))
        for depth in (13, 778)
        for t in (1, 2)
    )
    # As the probe reads it: the first ubatch at 1 thread, then four at 2 threads.
    prefill = tuple(
        ReferencePrefill(
            t, past, UBATCH, prefill_seconds(table, on, True, att, UBATCH, past, UBATCH, UBATCH, "f16", t, rates)
        )
        for t, past in ((1, 0), (2, 0), (2, 256), (2, 512), (2, 768))
    )
    return ReferenceRun(embedded.name, embedded.stat().st_size, N_CTX, UBATCH, "f16", decode, prefill)


def test_the_fit_recovers_the_factors_a_run_was_made_with(spec: ModelSpec, embedded_model: Path) -> None:
    probe = uniform_probe(8.0, 40.0, threads=(1, 2), attention_gflops={"f16": 10.0})
    run = _run(spec, embedded_model, probe, _constant((1.6, 1.3), (1.1, 1.7)))
    got = factors_for_run(spec, run, CpuRates(probe, 2))
    for t in (1, 2):
        assert got.decode(t) == pytest.approx((1.6, 1.3), rel=1e-3)
    assert got.prefill(1) == got.prefill(2) == pytest.approx((1.1, 1.7), rel=1e-3)


def test_each_thread_count_reads_a_prompt_of_its_own(spec: ModelSpec, embedded_model: Path) -> None:
    # A graph that costs its kernels 1.4x at 1 thread and 1.1x at 2 (prompts' weights), its
    # attention 1.7x at both: the 1-thread ubatch gives its own weights' factor, not the 2-thread one.
    probe = uniform_probe(8.0, 40.0, threads=(1, 2), attention_gflops={"f16": 10.0})
    made = _constant((1.0, 1.0), (1.1, 1.7))
    made = replace(made, prefill_base=(RateAt(1, 1.4), RateAt(2, 1.1)))
    got = factors_for_run(spec, _run(spec, embedded_model, probe, made), CpuRates(probe, 2))
    assert got.prefill(1) == pytest.approx((1.4, 1.7), rel=1e-3)
    assert got.prefill(2) == pytest.approx((1.1, 1.7), rel=1e-3)


def test_a_disturbed_run_is_bounded_not_believed(spec: ModelSpec, embedded_model: Path) -> None:
    probe = uniform_probe(8.0, 40.0, threads=(1, 2))
    run = _run(spec, embedded_model, probe, _constant((1.0, 1.0), (1.0, 1.0)))
    slow = replace(run, decode=tuple(replace(d, step_s=d.step_s * 20) for d in run.decode))
    got = factors_for_run(spec, slow, CpuRates(probe, 2))
    assert got.decode(1)[0] == FACTOR_MAX


def test_a_prompt_s_attention_is_learned_apart_from_its_weights(spec: ModelSpec, embedded_model: Path) -> None:
    probe = uniform_probe(8.0, 40.0, threads=(1, 2))
    # Made with attention twice as slow as the kernels say: the deeper ubatches take longer by
    # exactly that, which the fit gives to the attention, not to the weights.
    run = _run(spec, embedded_model, probe, _constant((1.0, 1.0), (1.5, 2.0)))
    base, att = factors_for_run(spec, run, CpuRates(probe, 2)).prefill(2)
    assert (base, att) == pytest.approx((1.5, 2.0), rel=1e-3)
    # Every ubatch equally slow (a slow moment, or weights the kernels misprice) is the weights':
    # the attention stays at its floor, the weights take the rest (less than the 1.5 the first
    # ubatch was made with: at the floor the deeper ubatches' attention is priced higher than 0).
    first = next(p.seconds for p in run.prefill if p.threads == 2)
    flat = replace(run, prefill=tuple(replace(p, seconds=first) if p.threads == 2 else p for p in run.prefill))
    base, att = factors_for_run(spec, flat, CpuRates(probe, 2)).prefill(2)
    assert att == BEST_CASE_MIN and 1.2 < base < 1.5


def test_attention_and_prompts_are_never_priced_faster_than_their_kernels_alone(
    spec: ModelSpec, embedded_model: Path
) -> None:
    # A run read at a fast moment against kernels read at a slow one: every part took 0.7 of what
    # the kernels say. A decode step's weights may (a small model's can come from the cache); a
    # kernel timed alone on its best shape is a floor for attention and a prompt's matrices.
    probe = uniform_probe(8.0, 40.0, threads=(1, 2), attention_gflops={"f16": 10.0})
    got = factors_for_run(
        spec, _run(spec, embedded_model, probe, _constant((0.7, 0.7), (0.7, 0.7))), CpuRates(probe, 2)
    )
    for t in (1, 2):
        base, att = got.decode(t)
        assert base < 1.0 and att == BEST_CASE_MIN
        assert got.prefill(t) == (BEST_CASE_MIN, BEST_CASE_MIN)


WITH_Q4_1 = ("q4_0", "q4_1", "q8_0", "f16", "f32")  # the built-in model's types among them


def test_predictions_apply_the_factors_to_weights_and_attention_apart(spec: ModelSpec, embedded_model: Path) -> None:
    probe = uniform_probe(8.0, 40.0, types=WITH_Q4_1, threads=(1, 2), attention_gflops={"f16": 10.0})
    with_run = replace(probe, reference=_run(spec, embedded_model, probe, _constant((1.5, 2.0), (1.2, 1.4))))

    def model(p: HostProbe) -> SpeedModel:
        target = measured_target(TargetRequest(cpu_only=True), p, cores=2)
        pl = plan(
            spec, target, Pins(n_ctx=8192, n_threads=2, n_threads_batch=2, type_k="f16", type_v="f16", flash_attn=True)
        )
        return SpeedModel(spec, pl.settings, target, pl.memory)

    raw, corrected = model(probe), model(with_run)
    assert raw.rates.graph is None and corrected.rates.graph is not None
    # A step near the start is nearly all weights; what a fuller cache adds is all attention.
    assert corrected.decode_seconds(1) == pytest.approx(1.5 * raw.decode_seconds(1), rel=1e-2)
    grow = raw.decode_seconds(4001) - raw.decode_seconds(1)
    assert corrected.decode_seconds(4001) - corrected.decode_seconds(1) == pytest.approx(2.0 * grow, rel=1e-3)
    assert corrected.prefill_seconds(512) > 1.2 * raw.prefill_seconds(512)


def test_one_thread_decode_weights_carry_only_to_the_built_in_model(
    spec: ModelSpec, embedded_model: Path, tmp_path: Path
) -> None:
    # With one thread no thread waits at a node: what the built-in model's 1-thread steps cost
    # beyond its kernels is its own. Other models take x1 there, and every other factor as it is.
    from testkit.gguf_models import write_model

    probe = uniform_probe(8.0, 40.0, types=WITH_Q4_1, threads=(1, 2), attention_gflops={"f16": 10.0})
    probe = replace(probe, reference=_run(spec, embedded_model, probe, _constant((1.5, 1.3), (1.2, 1.4))))
    other = load_model_spec(write_model(tmp_path / "other.gguf", "qwen2", weight_type="q8_0"))
    run, own, theirs = graph_factors(probe, 2), factors_for_model(spec, probe, 2), factors_for_model(other, probe, 2)
    assert run is not None and own == run and theirs is not None
    assert own.decode(1)[0] == pytest.approx(1.5, rel=0.02) and theirs.decode(1)[0] == 1.0
    assert theirs.decode(2) == own.decode(2) and theirs.decode(1)[1] == own.decode(1)[1]
    assert (theirs.prefill(1), theirs.prefill(2)) == (own.prefill(1), own.prefill(2))
    # No run, no factors for anyone.
    assert factors_for_model(other, replace(probe, reference=None), 2) is None
    # The plan says so where it applies: another model at 1 thread.
    target = measured_target(TargetRequest(cpu_only=True), probe, cores=2)
    for model, threads, said in ((other, 1, True), (other, 2, False), (spec, 1, False)):
        pl = plan(model, target, Pins(n_ctx=2048, n_threads=threads, n_threads_batch=threads))
        basis = next(r for r in pl.reasons if r.startswith("Speed basis"))
        assert ("at 1 thread is the built-in model's own" in basis) == said, basis
        assert SpeedModel(model, pl.settings, target, pl.memory).rates.graph == (theirs if model is other else own)


def test_a_run_of_another_file_or_none_leaves_the_kernels_alone(host_probe: HostProbe) -> None:
    assert graph_factors(replace(host_probe, reference=None), 2) is None
    assert host_probe.reference is not None
    other = replace(host_probe, reference=replace(host_probe.reference, model_bytes=1))
    assert graph_factors(other, 2) is None


def test_the_real_run_gives_bounded_factors_for_every_thread_count(host_probe: HostProbe) -> None:
    run = host_probe.reference
    assert run is not None
    threads = sorted({d.threads for d in run.decode})
    assert [(d.threads, d.depth > 500) for d in run.decode] == [(t, False) for t in threads] + [
        (t, True) for t in threads
    ]
    # The first ubatch at each smaller count, then the whole prompt with all threads.
    most = max(threads)
    assert [(p.threads, p.n_past) for p in run.prefill] == (
        [(t, 0) for t in threads if t != most] + [(most, n) for n in (0, 512, 1024, 1536)]
    )
    assert all(p.seconds > 0 for p in run.prefill)
    assert not probe_outdated(host_probe)
    # A record from before the prompt was read this deep is measured again at the next start.
    assert probe_outdated(replace(host_probe, reference=replace(run, prefill=run.prefill[-2:])))
    # ... and one from before every thread count read a prompt of its own.
    if len(threads) > 1:
        only_most = tuple(p for p in run.prefill if p.threads == most)
        assert probe_outdated(replace(host_probe, reference=replace(run, prefill=only_most)))
    # A record from before the probe timed the elementwise steps is measured again too.
    assert probe_outdated(replace(host_probe, elementwise=None))
    # ... and one from before it timed rows of 512.
    assert probe_outdated(
        replace(host_probe, kernels=tuple(replace(k, decode_shortest_gbps=()) for k in host_probe.kernels))
    )
    got = graph_factors(host_probe, max(threads))
    assert got is not None
    for t in threads:
        for f in (*got.decode(t), *got.prefill(t)):
            assert 0.5 <= f <= FACTOR_MAX
    assert decode_record(HostProbe, encode_record(host_probe)) == host_probe


def test_a_run_whose_weight_types_were_not_measured_gives_no_factors(spec: ModelSpec, embedded_model: Path) -> None:
    # The built-in model's Q4_1 priced as the probe's Q4_0 would charge the kernel's difference to
    # the graph and apply it to every model: no factors until Q4_1 is measured.
    run = _run(
        spec,
        embedded_model,
        uniform_probe(8.0, 40.0, types=WITH_Q4_1, threads=(1, 2)),
        _constant((1.2, 1.0), (1.1, 1.0)),
    )
    without = replace(uniform_probe(8.0, 40.0, threads=(1, 2)), reference=run)
    assert graph_factors(without, 2) is None
    measured = replace(uniform_probe(8.0, 40.0, types=WITH_Q4_1, threads=(1, 2)), reference=run)
    assert graph_factors(measured, 2) is not None
    # What a probe and the kernels added for a model measure: their own types and the built-in model's.
    wanted = with_reference_types(("Q6_K", "q4_0"))
    assert wanted[:2] == ["q6_k", "q4_0"]
    assert set(weight_table(spec).types()) <= set(wanted) and len(wanted) == len(set(wanted))
