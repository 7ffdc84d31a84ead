"""What a prediction makes of what replies measured: their median, weighed against the probe where
it measured the backend, bounded, and a model's own window once it holds enough replies."""

from __future__ import annotations

import pytest

from testkit.machines import uniform_probe
from vrampilot.planner.learned_factors import (
    FACTOR_MAX,
    FACTOR_MIN,
    MODEL_MIN_REPLIES,
    PROBE_PRIOR_REPLIES,
    LearnedFactors,
    learned_factors,
    median_factor,
    window_factors,
)
from vrampilot.speed import FACTOR_WINDOW, MachineSpeed, SpeedFactors


def test_one_slow_reply_is_outvoted_by_the_median() -> None:
    f = SpeedFactors("cpu:haswell")
    for r in (0.9, 0.92, 0.4, 0.91):  # 0.4: another program took the CPU during that reply
        f = f.learn(decode_ratio=r, prefill_ratio=None, at="t")
    learned = learned_factors(MachineSpeed("m").with_factors(f), "cpu:haswell")
    assert learned.decode == pytest.approx(0.905)
    assert learned.prefill == 1.0 and learned.n_replies == 4


def test_factors_are_bounded() -> None:
    assert median_factor((4.0,) * FACTOR_WINDOW) == FACTOR_MAX
    assert median_factor((0.3,) * FACTOR_WINDOW) == FACTOR_MIN
    assert median_factor(()) == 1.0  # nothing learned: the prediction as it is


def test_the_probe_s_prediction_weighs_as_replies_against_what_replies_taught() -> None:
    probed = MachineSpeed("m", uniform_probe()).with_factors(SpeedFactors("cpu:x", (0.8, 0.5, 0.8)))
    assert learned_factors(probed, "cpu:x").decode == pytest.approx(0.8 ** (3 / (3 + PROBE_PRIOR_REPLIES)))
    assert learned_factors(probed, "cpu:x").prefill == 1.0  # nothing learned: the prediction as it is
    # Nothing measured a GPU, nor a CPU never probed: replies there are followed whole.
    gpu = probed.with_factors(SpeedFactors("gpu:x", (0.8, 0.5, 0.8)))
    assert learned_factors(gpu, "gpu:x").decode == pytest.approx(0.8)
    unprobed = MachineSpeed("m").with_factors(SpeedFactors("cpu:x", (0.8, 0.5, 0.8)))
    assert learned_factors(unprobed, "cpu:x").decode == pytest.approx(0.8)
    # Bounded after the blend, as before it.
    high = probed.with_factors(SpeedFactors("cpu:x", (5.0,) * FACTOR_WINDOW))
    assert learned_factors(high, "cpu:x").decode == FACTOR_MAX
    # Doctor's view of one stored window weighs it the same way.
    assert window_factors(probed, probed.factors[0]) == learned_factors(probed, "cpu:x")


def test_a_model_s_own_window_takes_over_once_it_holds_enough_replies() -> None:
    shared = SpeedFactors("gpu:x", (0.8, 0.8, 0.8))
    speed = MachineSpeed("m").with_factors(shared)
    assert learned_factors(speed, "gpu:x", "a.gguf") == LearnedFactors("gpu:x", 0.8, 1.0, 3, "")
    own = SpeedFactors("gpu:x", (1.2,) * MODEL_MIN_REPLIES, model="a.gguf")
    mine = speed.with_factors(own)
    assert learned_factors(mine, "gpu:x", "a.gguf") == LearnedFactors("gpu:x", 1.2, 1.0, MODEL_MIN_REPLIES, "a.gguf")
    assert learned_factors(mine, "gpu:x", "b.gguf").decode == pytest.approx(0.8)  # another model: the backend's
    fewer = speed.with_factors(SpeedFactors("gpu:x", (1.2,) * (MODEL_MIN_REPLIES - 1), model="a.gguf"))
    assert learned_factors(fewer, "gpu:x", "a.gguf").decode == pytest.approx(0.8)
    assert learned_factors(None, "gpu:x") == LearnedFactors("gpu:x")
