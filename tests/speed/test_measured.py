"""What a machine measured, as data: rates per thread count, the windows of what replies measured."""

from __future__ import annotations

import json

import pytest

from vrampilot.speed.codec import decode, encode
from vrampilot.speed.measured import (
    FACTOR_WINDOW,
    AttentionRates,
    HostProbe,
    KernelRates,
    LastReply,
    MachineSpeed,
    RateAt,
    SpeedFactors,
    StepTiming,
    rate_at,
)


def _probe(**kw: object) -> HostProbe:
    base = dict(
        measured_at="2026-12-01T10:00:00+00:00",
        duration_s=1.2,
        cpu_variant="haswell",
        ram_read_gbps=(RateAt(1, 20.0), RateAt(4, 40.0)),
        steps=(
            StepTiming(2, 256, (RateAt(1, 100.0),)),
            StepTiming(12, 256, (RateAt(1, 300.0),)),
            StepTiming(2, 32768, (RateAt(1, 425.2),)),
        ),
        kernels=(
            KernelRates("q8_0", "CPU", (RateAt(1, 10.0),), (RateAt(1, 9.0),), (RateAt(1, 50.0),), (RateAt(1, 30.0),)),
        ),
        attention=(AttentionRates("f16", 64, (RateAt(1, 10.0),), (RateAt(1, 30.0),)),),
    )
    base.update(kw)
    return HostProbe(**base)  # type: ignore[arg-type]  # a dict of the fields; mypy cannot match **dict to each


def test_rate_between_measured_thread_counts_is_interpolated_and_flat_beyond() -> None:
    rates = (RateAt(1, 10.0), RateAt(4, 40.0))
    assert rate_at(rates, 1) == 10.0
    assert rate_at(rates, 2) == pytest.approx(20.0)
    assert rate_at(rates, 4) == 40.0
    assert rate_at(rates, 16) == 40.0  # more threads than measured (hyper-threads): no gain
    assert rate_at((), 2) == 0.0


def test_replies_are_kept_in_a_window_and_accidents_are_not_kept() -> None:
    f = SpeedFactors("cpu:x")
    for _ in range(FACTOR_WINDOW + 5):
        f = f.learn(decode_ratio=4.0, prefill_ratio=0.3, at="t")
    assert f.decode_ratios == (4.0,) * FACTOR_WINDOW and f.prefill_ratios == (0.3,) * FACTOR_WINDOW
    assert f.learn(decode_ratio=None, prefill_ratio=None, at="u").n_replies == FACTOR_WINDOW
    # Accidents (a suspended laptop) are not learned at all.
    assert f.learn(decode_ratio=50.0, prefill_ratio=0.01, at="t").decode_ratios == f.decode_ratios
    speed = MachineSpeed("abc", _probe()).with_factors(SpeedFactors("cpu:x", (0.8,)))
    assert speed.factors_for("cpu:x") == SpeedFactors("cpu:x", (0.8,))
    assert speed.factors_for("cpu:x", "m.gguf") == SpeedFactors("cpu:x", model="m.gguf")  # nothing of its own
    assert decode(MachineSpeed, json.loads(json.dumps(encode(speed)))) == speed


def test_a_probe_whose_pace_gauge_read_slower_than_the_replies_usual_ran_at_a_slow_moment() -> None:
    from vrampilot.speed.measured import PROBE_PACE_READINGS, SLOW_PACE, PaceReading

    probe = _probe(pace_ms=(RateAt(1, 3.0), RateAt(2, 2.0)))
    speed = MachineSpeed("abc", probe)
    assert speed.probe_pace_share() is None and not speed.probe_read_slow  # no replies read it yet
    for _ in range(PROBE_PACE_READINGS - 1):
        speed = speed.with_pace(2, 1.5)
    assert speed.probe_pace_share() is None  # too few readings to judge
    speed = speed.with_pace(2, 1.5)
    assert speed.probe_pace_share() == pytest.approx(0.75) and speed.probe_read_slow
    # The slowest thread count decides; within SLOW_PACE it is the machine's usual spread.
    for _ in range(PROBE_PACE_READINGS):
        speed = speed.with_pace(1, 3.0 * SLOW_PACE + 0.01)
    assert speed.probe_pace_share() == pytest.approx(0.75)
    ok = MachineSpeed("abc", probe, paces=tuple(PaceReading(1, 2.7) for _ in range(PROBE_PACE_READINGS)))
    assert ok.probe_pace_share() == pytest.approx(0.9) and not ok.probe_read_slow
    assert not MachineSpeed("abc").probe_read_slow  # never measured: nothing to judge


def test_machine_speed_round_trips_through_json() -> None:
    last = LastReply("m.gguf", "cpu:haswell", "t", 10.0, 11.0, 100.0, 90.0, 30, 40)
    m = MachineSpeed("abc", _probe(), (SpeedFactors("cpu:haswell", (0.9,), (1.1,), "t"),), (last,))
    again = decode(MachineSpeed, json.loads(json.dumps(encode(m))))
    assert again == m


def test_the_last_reply_of_a_model_replaces_its_previous_one() -> None:
    m = MachineSpeed("abc")
    a = LastReply("a.gguf", "cpu:x", "t1", 10.0, 11.0, 100.0, 90.0, 30, 40)
    b = LastReply("b.gguf", "cpu:x", "t1", 20.0, 21.0, 100.0, 90.0, 30, 40)
    a2 = LastReply("a.gguf", "cpu:x", "t2", 12.0, 11.0, 100.0, 90.0, 30, 40)
    m = m.with_last_reply(a).with_last_reply(b).with_last_reply(a2)
    assert m.last_reply("a.gguf", "cpu:x") == a2
    assert m.last_reply("b.gguf", "cpu:x") == b
    assert m.last_reply("a.gguf", "gpu:y") is None
    assert len(m.last_replies) == 2


def test_a_probe_taken_on_a_busy_machine_says_so() -> None:
    assert not _probe(others_cpu_share=0.1).busy
    assert _probe(others_cpu_share=0.6).busy
    assert _probe(app_busy=True).busy
    assert _probe().ram_peak_gbps == 40.0
    assert _probe().kernel("Q8_0") is not None and _probe().kernel("q4_k") is None


def test_fixed_costs_are_separated_from_the_tiny_model_s_steps() -> None:
    # No f16 kernel measured: the output matrix's read is not subtracted.
    f = _probe().fixed_costs(1)
    assert f.layer_s == pytest.approx(20e-6)  # (300 - 100) / (12 - 2) us
    assert f.vocab_entry_s == pytest.approx((425.2 - 100) / (32768 - 256) * 1e-6)
    assert f.step_s == pytest.approx(100e-6 - 2 * 20e-6 - 256 * f.vocab_entry_s)
    # With the f16 rate known, the larger vocabulary's bigger output matrix is not counted as sampling.
    f16 = KernelRates("f16", "CPU", (RateAt(1, 10.0),), (RateAt(1, 10.0),), (RateAt(1, 1.0),))
    g = _probe(kernels=(f16,)).fixed_costs(1)
    assert g.vocab_entry_s == pytest.approx(f.vocab_entry_s - 64 / 10e9)  # a 64-byte f16 row at 10 GB/s
