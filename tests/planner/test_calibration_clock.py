"""Replies learned while the clock said 1971, then 2100, then the real time (real child processes,
libfaketime): each is kept, in the order it came, and the newest is the one reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clock import FUTURE, PAST, run_at
from tests.planner.test_calibration import _plan
from vrampilot.planner.calibration import last_reply_for
from vrampilot.planner.speed_model.predict import backend_key
from vrampilot.speed import load_machine_speed

FINGERPRINT = "fp-clock"
pytestmark = pytest.mark.slow
_LEARN = """
    from dataclasses import replace
    from pathlib import Path
    from testkit.machines import uniform_probe
    from tests.planner.test_calibration import _plan, _reply
    from vrampilot.speed import load_machine_speed, update_machine_speed
    from vrampilot.planner.calibration import record_reply
    speed = load_machine_speed({fp!r})
    if speed.probe is None:
        probe = uniform_probe(types=("q4_1", "q8_0"))
        speed = update_machine_speed({fp!r}, lambda m: replace(m, probe=probe))
    p = _plan(Path({model!r}), speed)
    print(record_reply(speed, p, _reply(p, {scale}, 1.0)).last_replies[-1].at)
"""


def test_replies_learned_at_any_clock_are_kept_in_the_order_they_came(
    embedded_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VRAMPILOT_HOME", str(tmp_path / "home"))
    stamps = []
    for when, scale in ((PAST, 0.8), (FUTURE, 0.9), (None, 0.7)):
        out = run_at(when, _LEARN.format(fp=FINGERPRINT, model=str(embedded_model), scale=scale))
        stamps.append(out.strip())
    assert [s[:4] for s in stamps[:2]] == ["1971", "2100"]
    speed = load_machine_speed(FINGERPRINT)
    p = _plan(embedded_model, speed)
    learned = speed.factors_for(backend_key(p.target, p.settings))
    assert learned.decode_ratios == pytest.approx((0.8, 0.9, 0.7), rel=0.01)
    last = last_reply_for(p)
    assert last is not None and last.at == stamps[-1]  # the reply learned last, though 2100 is "later"
