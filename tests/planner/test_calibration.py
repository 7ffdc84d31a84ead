"""Learning from replies: each reply's measured speed against the prediction for that reply, kept
per machine and backend, robust to busy machines and short replies, used by later plans."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from testkit.machines import measured_target, uniform_probe
from vrampilot.gguf import load_model_spec
from vrampilot.planner.calibration import (
    MIN_PREFILL_TOKENS,
    ReplyMeasurement,
    last_reply_for,
    learn_reply,
    record_reply,
    reply_prediction,
)
from vrampilot.planner.learned_factors import (
    FACTOR_MAX,
    FACTOR_MIN,
    MODEL_MIN_REPLIES,
    PROBE_PRIOR_REPLIES,
    learned_factors,
    prior_replies,
)
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.speed_model.predict import (
    SpeedModel,
    backend_key,
    corrected_decode_seconds,
    shallow_decode_ratio,
)
from vrampilot.planner.target import TargetRequest
from vrampilot.speed import (
    FACTOR_WINDOW,
    PACES_KEPT,
    RATIO_MAX,
    RATIO_MIN,
    HostProbe,
    MachineSpeed,
    PaceReading,
    RateAt,
    SpeedFactors,
    decode_record,
    encode_record,
    load_machine_speed,
    update_machine_speed,
)

PINS = Pins(n_ctx=2048, n_threads=1, n_threads_batch=1)


def _plan(embedded_model: Path, speed: MachineSpeed) -> Plan:
    return plan(
        load_model_spec(embedded_model),
        measured_target(TargetRequest(cpu_only=True), None, speed=speed),
        PINS,
    )


def followed(ratio: float, n: int) -> float:
    """The factor n replies that all measured `ratio` teach where the probe measured the machine:
    its prediction weighs as PROBE_PRIOR_REPLIES replies."""
    return float(ratio ** (n / (n + PROBE_PRIOR_REPLIES)))


def _reply(p: Plan, decode_scale: float, prefill_scale: float, **kw: object) -> ReplyMeasurement:
    """A reply measured at these multiples of what the plan predicts for it: its prompt read at
    `prefill_scale` times the predicted speed, its decode steps' part that does not grow with the
    context at `decode_scale` (the part replies teach: speed.py `corrected_decode_seconds`)."""
    shape = {"prompt_tokens": 900, "evaluated_tokens": 600, "completion_tokens": 64, **kw}
    probe = ReplyMeasurement(**shape, decode_tps=0.0, prefill_tps=0.0)  # type: ignore[arg-type]  # a dict of the fields; mypy cannot match **dict to each
    pred = reply_prediction(p, probe, calibrated=False)
    model = SpeedModel(p.spec, p.settings, p.target, p.memory)
    step = 1.0 / pred.decode_tps
    decode_tps = 1.0 / corrected_decode_seconds(step, model.decode_seconds(1), decode_scale)
    return replace(probe, decode_tps=decode_tps, prefill_tps=pred.prefill_tps * prefill_scale)


def test_later_plans_move_towards_what_replies_measured(embedded_model: Path) -> None:
    speed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    p = _plan(embedded_model, speed)
    for scale in (0.8, 0.82, 0.78):
        speed = learn_reply(speed, p, _reply(p, scale, 1.25))
    key = backend_key(p.target, p.settings)
    assert speed.factors_for(key).n_replies == 3
    later = _plan(embedded_model, speed)
    # The probe measured this machine: its prediction weighs as two replies against the three.
    assert later.speed.decode_factor == pytest.approx(0.8**0.6) == pytest.approx(followed(0.8, 3))
    assert later.speed.decode_tps == pytest.approx(0.8**0.6 * p.speed.decode_tps)
    assert later.speed.prefill_tps == pytest.approx(1.25**0.6 * p.speed.prefill_tps)
    assert later.speed.calibration_replies == 3
    assert (
        f"corrected by 3 measured replies of {embedded_model.name} (generating x0.87, prompts x1.14)"
        in later.reasons[-1]
    )
    # A machine that keeps measuring the same goes most of the way: a full window of replies
    # against the probe's two.
    for _ in range(FACTOR_WINDOW):
        speed = learn_reply(speed, p, _reply(p, 0.8, 1.25))
    full = _plan(embedded_model, speed).speed
    assert full.decode_factor == pytest.approx(followed(0.8, FACTOR_WINDOW)) == pytest.approx(0.8 ** (9 / 11))
    assert full.prefill_tps == pytest.approx(followed(1.25, FACTOR_WINDOW) * p.speed.prefill_tps)
    reply = _reply(p, 0.8, 1.25)
    assert 1.0 < reply_prediction(_plan(embedded_model, speed), reply).decode_tps / reply.decode_tps < 1.05


def test_without_a_probe_replies_are_followed_whole(embedded_model: Path) -> None:
    """Rates nobody measured (a machine never probed; a GPU) are no evidence against replies."""
    speed = MachineSpeed("m")
    p = _plan(embedded_model, speed)
    for _ in range(3):
        speed = learn_reply(speed, p, _reply(p, 0.8, 1.25))
    reply = _reply(p, 0.8, 1.25)
    pred = reply_prediction(_plan(embedded_model, speed), reply)
    assert pred.decode_tps == pytest.approx(reply.decode_tps)
    assert pred.prefill_tps == pytest.approx(reply.prefill_tps)
    probed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    assert prior_replies(probed, "cpu:zen4, 2 threads") == PROBE_PRIOR_REPLIES
    assert prior_replies(probed, "gpu:NVIDIA GeForce RTX 4090") == 0.0
    assert prior_replies(speed, "cpu:zen4, 2 threads") == 0.0


def test_generating_is_corrected_where_replies_measure_it_not_in_the_attention_over_the_cache(
    embedded_model: Path,
) -> None:
    """Replies are shallow: what they teach about a decode step is the part that does not grow with
    the context. A deep step keeps the attention the model prices for it."""
    speed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    p = _plan(embedded_model, speed)
    model = SpeedModel(p.spec, p.settings, p.target, p.memory)
    t0, t_full = model.decode_seconds(1), model.decode_seconds(p.settings.n_ctx)
    assert t_full > 1.2 * t0  # the attention over a full context is worth keeping apart
    for _ in range(3):
        speed = learn_reply(speed, p, _reply(p, 1.25, 1.0))
    later = _plan(embedded_model, speed)
    f = followed(1.25, 3)
    assert later.speed.decode_factor == pytest.approx(f)
    assert later.speed.decode_tps == pytest.approx(f / t0)
    assert later.speed.decode_tps_full_ctx == pytest.approx(1.0 / (t0 / f + t_full - t0))
    # A reply whose measured step is mostly the attention the model prices says little about the
    # rest: its ratio is floored rather than sent to infinity.
    assert shallow_decode_ratio(0.9 * (t_full - t0), t_full, t0) == pytest.approx(20.0)


def test_replies_teach_the_thread_counts_they_ran_at(embedded_model: Path) -> None:
    # What 2-thread replies taught did not hold at 1 thread (bench/speed.py): each CPU thread
    # setting learns on its own, and another one starts from the probe alone.
    speed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    two = plan(
        load_model_spec(embedded_model),
        measured_target(TargetRequest(cpu_only=True), None, speed=speed),
        replace(PINS, n_threads=2, n_threads_batch=2),
    )
    for _ in range(2):
        speed = learn_reply(speed, two, _reply(two, 0.7, 1.3))

    def again(pins: Pins) -> Plan:
        return plan(
            load_model_spec(embedded_model),
            measured_target(TargetRequest(cpu_only=True), None, speed=speed),
            pins,
        )

    assert backend_key(two.target, two.settings).endswith(", 2 threads")
    learned = again(replace(PINS, n_threads=2, n_threads_batch=2)).speed
    assert (learned.decode_factor, learned.prefill_factor) == pytest.approx((followed(0.7, 2), followed(1.3, 2)))
    one = again(PINS)
    assert backend_key(one.target, one.settings).endswith(", 1 thread")
    assert (one.speed.decode_factor, one.speed.prefill_factor, one.speed.calibration_replies) == (1.0, 1.0, 0)
    mixed = again(replace(PINS, n_threads=2, n_threads_batch=1))
    assert backend_key(mixed.target, mixed.settings).endswith(", 2 threads (1 for prompts)")
    assert mixed.speed.calibration_replies == 0


def test_a_model_s_own_replies_take_over_from_the_machine_s_once_there_are_two(
    embedded_model: Path, tmp_path: Path
) -> None:
    from vrampilot.speed import MODEL_FACTORS_KEPT

    assert MODEL_MIN_REPLIES == 2
    other = tmp_path / "Other-135M.gguf"  # another file name is another model to the factors
    other.symlink_to(embedded_model)
    third = tmp_path / "Third-135M.gguf"
    third.symlink_to(embedded_model)

    def plan_of(path: Path, speed: MachineSpeed) -> Plan:
        return plan(
            load_model_spec(path),
            measured_target(TargetRequest(cpu_only=True), None, speed=speed),
            PINS,
        )

    speed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    a = plan_of(embedded_model, speed)
    assert a.speed.calibration_model == "" and a.speed.calibration_replies == 0  # nothing learned anywhere yet
    for _ in range(3):
        speed = learn_reply(speed, a, _reply(a, 0.8, 1.0))
    # A model without replies of its own is corrected by every model's on this backend.
    b = plan_of(other, speed)
    assert b.speed.decode_factor == pytest.approx(followed(0.8, 3)) and b.speed.calibration_model == ""
    assert "corrected by 3 measured replies on this machine" in b.reasons[-1]
    speed = learn_reply(speed, b, _reply(b, 1.2, 1.0))
    # One reply of its own: not yet (the machine's window now holds four).
    assert plan_of(other, speed).speed.decode_factor == pytest.approx(followed(0.8, 4))
    speed = learn_reply(speed, b, _reply(b, 1.2, 1.0))
    b2 = plan_of(other, speed)
    assert b2.speed.decode_factor == pytest.approx(followed(1.2, 2)) and b2.speed.calibration_model == other.name
    assert plan_of(embedded_model, speed).speed.decode_factor == pytest.approx(followed(0.8, 3))  # its own three
    key = backend_key(a.target, a.settings)
    assert speed.factors_for(key).decode_ratios == pytest.approx((0.8, 0.8, 0.8, 1.2, 1.2))
    assert plan_of(third, speed).speed.decode_factor == pytest.approx(followed(0.8, 5))  # the machine's median
    # Stored and read back with the model each window belongs to.
    again = decode_record(MachineSpeed, encode_record(speed))
    assert learned_factors(again, key, other.name) == learned_factors(speed, key, other.name)
    assert again.factors_for(key, other.name).n_replies == 2
    # Only the most recently updated models keep factors of their own; the backend's stay.
    for i in range(MODEL_FACTORS_KEPT + 2):
        speed = speed.with_factors(SpeedFactors(key, (1.1,), (), f"t{i}", model=f"m{i}.gguf"))
    models = [f.model for f in speed.factors if f.model]
    assert len(models) == MODEL_FACTORS_KEPT and models[-1] == f"m{MODEL_FACTORS_KEPT + 1}.gguf"
    assert speed.factors_for(key).n_replies == 5


def test_a_reply_on_a_busy_machine_is_shown_but_not_learned(embedded_model: Path) -> None:
    speed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    p = _plan(embedded_model, speed)
    reply = _reply(p, 0.3, 0.3, others_cpu_share=0.6)
    after = learn_reply(speed, p, reply)
    assert after.factors_for(backend_key(p.target, p.settings)).n_replies == 0
    last = last_reply_for(_plan(embedded_model, after))
    assert last is not None and last.decode_tps == pytest.approx(reply.decode_tps, abs=0.01)
    assert last.prefill_tps == pytest.approx(0.3 * last.predicted_prefill_tps, rel=1e-2)
    assert last.set_aside == "other programs used 60% of the CPU"
    assert (last.prompt_tokens, last.context_tokens) == (600, 900)


def test_a_reply_read_while_the_machine_ran_slow_is_shown_but_not_learned(embedded_model: Path) -> None:
    # The probe read the pace gauge at 2.0 ms (PINS run at 1 thread).
    speed = MachineSpeed("m", replace(uniform_probe(types=("q4_1", "q8_0")), pace_ms=(RateAt(1, 2.0),)))
    p = _plan(embedded_model, speed)
    key = backend_key(p.target, p.settings)
    # 2.5 ms: the machine ran at 80% of its usual pace (under SLOW_PACE): set aside, its reading kept.
    slow = learn_reply(speed, p, _reply(p, 0.6, 0.6, pace_ms=2.5))
    assert slow.factors_for(key).n_replies == 0
    last = slow.last_replies[-1]
    assert last.pace_share == pytest.approx(0.8)
    assert last.set_aside == "this machine ran at 80% of its usual pace"
    assert slow.paces == (PaceReading(1, 2.5),)
    # At its usual pace (the median of the probe's reading and the replies'), a reply teaches.
    usual = learn_reply(slow, p, _reply(p, 0.9, 0.9, pace_ms=2.1))
    assert usual.factors_for(key).decode_ratios == pytest.approx((0.9,))
    assert usual.last_replies[-1].set_aside == ""
    assert usual.usual_pace_ms(1) == pytest.approx(2.1)  # median of 2.0, 2.5, 2.1
    assert usual.usual_pace_ms(2) is None  # never read at 2 threads: nothing to compare with
    # The record keeps it all.
    assert decode_record(MachineSpeed, encode_record(usual)) == usual
    # A gauge never read (a GPU plan, a record from before the gauge) changes nothing.
    assert learn_reply(speed, p, _reply(p, 0.9, 0.9)).factors_for(key).n_replies == 1
    # A machine never gauged before learns from its first reading on.
    bare = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    first = learn_reply(bare, p, _reply(p, 0.9, 0.9, pace_ms=9.0))
    assert first.factors_for(key).n_replies == 1 and first.last_replies[-1].pace_share is None


def test_the_pace_window_follows_the_machine(embedded_model: Path) -> None:
    """A machine that got slower for good (its usual moved) is learned from again once the recent
    readings outvote the probe's."""
    speed = MachineSpeed("m", replace(uniform_probe(types=("q4_1", "q8_0")), pace_ms=(RateAt(1, 2.0),)))
    p = _plan(embedded_model, speed)
    asides = []
    for _ in range(4):
        speed = learn_reply(speed, p, _reply(p, 0.7, 0.7, pace_ms=3.0))
        asides.append(speed.last_replies[-1].set_aside != "")
    # The 2nd compares with the median of 2.0 and 3.0 (2.5: 83%), the 3rd with that of 2.0, 3.0, 3.0.
    assert asides == [True, True, False, False]
    assert len(speed.paces) == 4
    for _ in range(PACES_KEPT + 5):
        speed = speed.with_pace(1, 3.0)
    assert len(speed.paces) == PACES_KEPT


def test_too_short_to_time_is_not_learned(embedded_model: Path) -> None:
    speed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    p = _plan(embedded_model, speed)
    f = learn_reply(speed, p, _reply(p, 0.5, 0.5, completion_tokens=3)).factors_for(backend_key(p.target, p.settings))
    assert f.decode_ratios == () and len(f.prefill_ratios) == 1
    f = learn_reply(speed, p, _reply(p, 0.5, 0.5, evaluated_tokens=2)).factors_for(backend_key(p.target, p.settings))
    assert len(f.decode_ratios) == 1 and f.prefill_ratios == ()
    # A prompt under one ubatch (MIN_PREFILL_TOKENS) teaches generating only.
    f = learn_reply(speed, p, _reply(p, 0.5, 0.5, evaluated_tokens=MIN_PREFILL_TOKENS - 1)).factors_for(
        backend_key(p.target, p.settings)
    )
    assert len(f.decode_ratios) == 1 and f.prefill_ratios == ()
    f = learn_reply(speed, p, _reply(p, 0.5, 0.5, evaluated_tokens=MIN_PREFILL_TOKENS)).factors_for(
        backend_key(p.target, p.settings)
    )
    assert len(f.prefill_ratios) == 1


def test_a_reply_is_judged_against_this_machine_s_current_figures(embedded_model: Path) -> None:
    # The model was loaded before the probe finished: its plan used assumed rates.
    probe = uniform_probe(types=("q4_1", "q8_0"))
    stale = _plan(embedded_model, MachineSpeed("m"))
    measured = MachineSpeed("m", probe)
    reply = _reply(_plan(embedded_model, measured), 0.9, 0.9)
    learned = learn_reply(measured, stale, reply).factors_for(backend_key(stale.target, stale.settings))
    assert learned.decode_ratios == pytest.approx((0.9,)) and learned.prefill_ratios == pytest.approx((0.9,))


def test_replies_are_kept_with_what_other_processes_learned_meanwhile(embedded_model: Path) -> None:
    speed = MachineSpeed(load_machine_speed("fp-calibration").fingerprint, uniform_probe(types=("q4_1", "q8_0")))
    update_machine_speed(speed.fingerprint, lambda m: replace(m, probe=speed.probe))
    p = _plan(embedded_model, speed)
    # Another process (the CLI beside the app) learned a GPU reply after `speed` was read.
    update_machine_speed(speed.fingerprint, lambda m: m.with_factors(SpeedFactors("gpu:x", (0.9,))))
    saved = record_reply(speed, p, _reply(p, 0.7, 1.0))
    again = load_machine_speed(speed.fingerprint)
    assert again == saved
    assert again.factors_for("gpu:x").decode_ratios == (0.9,)
    assert again.factors_for(backend_key(p.target, p.settings)).decode_ratios == pytest.approx((0.7,))


@pytest.mark.slow
def test_a_real_reply_teaches_the_prediction_for_it(embedded_model: Path, host_probe: HostProbe) -> None:
    from vrampilot.engine import Engine, Message, SamplingParams

    speed = MachineSpeed("real", host_probe)
    p = _plan(embedded_model, speed)
    engine = Engine()
    engine.load(p)
    try:
        # A prompt long enough to teach prefill (MIN_PREFILL_TOKENS) as well as decoding.
        places = (
            "Paris, Lyon, Vienna, Budapest, Prague, Krakow, Berlin, Hamburg, Amsterdam, Rotterdam, Brussels, Ghent, "
            * 20
        )
        reply = engine.chat(
            [Message("user", f"I visited {places}and more. Name three rivers in Europe.")],
            SamplingParams(temperature=0.0, max_tokens=24, seed=1),
        )
    finally:
        engine.unload()
    s = reply.stats
    assert s.completion_tokens > 8 and s.decode_tps > 0 and s.prefill_tps > 0
    m = ReplyMeasurement(s.prompt_tokens, s.evaluated_tokens, s.completion_tokens, s.decode_tps, s.prefill_tps, 0.0)
    after = learn_reply(speed, p, m)
    factors = after.factors_for(backend_key(p.target, p.settings))
    # One reply against the probe's two: its factors move a third of the way (in log), so the
    # prediction for the same reply moves towards what it measured (generating: in the part of a
    # step that does not grow with the context; prompts: whole). A reply more than RATIO_MAX from
    # its prediction either way (possible on a very busy machine) is an accident and teaches
    # nothing: the prediction stays where it was. Either way the figures are bounded.
    raw = reply_prediction(p, m, calibrated=False)
    later = _plan(embedded_model, after)
    pred = reply_prediction(later, m)

    def moved(ratio: float) -> float:
        root: float = ratio ** (1 / 3)
        return min(FACTOR_MAX, max(FACTOR_MIN, root))

    if factors.decode_ratios:
        assert later.speed.decode_factor == pytest.approx(moved(factors.decode_ratios[0]))
        lo, hi = sorted((raw.decode_tps, s.decode_tps))
        assert lo * 0.999 <= pred.decode_tps <= hi * 1.001
    else:
        assert not RATIO_MIN <= s.decode_tps / raw.decode_tps <= RATIO_MAX
        assert pred.decode_tps == pytest.approx(raw.decode_tps)
    ratio = s.prefill_tps / raw.prefill_tps
    if factors.prefill_ratios:
        assert pred.prefill_tps == pytest.approx(raw.prefill_tps * moved(ratio), rel=1e-2)
    else:
        assert not RATIO_MIN <= ratio <= RATIO_MAX
        assert pred.prefill_tps == pytest.approx(raw.prefill_tps)


def test_a_model_split_with_the_cpu_learns_apart_from_the_same_file_wholly_on_the_gpu(embedded_model: Path) -> None:
    """Issue 57 (noticed in the MoE round): the model's own factors were one window per file, so
    replies at -ngl 10, paced by the 21 layers the CPU runs, corrected the same file at full offload,
    and the other way round. A split plan now learns under its placement; whole plans keep the name."""
    spec = load_model_spec(embedded_model)

    def plan_at(ngl: int, speed: MachineSpeed) -> Plan:
        target = measured_target(TargetRequest(vram_bytes=8 << 30), None, speed=speed)
        return plan(spec, target, replace(PINS, n_gpu_layers=ngl))

    speed = MachineSpeed("m", uniform_probe(types=("q4_1", "q8_0")))
    split, whole = plan_at(10, speed), plan_at(spec.n_layer + 1, speed)
    assert backend_key(split.target, split.settings) == backend_key(whole.target, whole.settings)
    for _ in range(2):
        speed = learn_reply(speed, split, _reply(split, 0.5, 1.0))
    for _ in range(2):
        speed = learn_reply(speed, whole, _reply(whole, 1.2, 1.0))
    split, whole = plan_at(10, speed), plan_at(spec.n_layer + 1, speed)
    assert split.speed.decode_factor < 1.0 < whole.speed.decode_factor
    assert split.speed.calibration_model == f"{embedded_model.name} (-ngl 10)"
    assert whole.speed.calibration_model == embedded_model.name
    last_split, last_whole = last_reply_for(split), last_reply_for(whole)
    assert last_split is not None and last_whole is not None
    assert last_split.model == split.speed.calibration_model and last_whole.model == embedded_model.name
