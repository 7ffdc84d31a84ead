"""Learning from every reply: measured speed against the prediction for that very reply.

A reply's stats say how fast llama.cpp read its prompt (the tokens it evaluated, after the ones
reused from the cache) and generated (tokens after the first, over the context the reply ran at).
The speed model predicts the same two numbers for the same conditions (`reply_prediction`), so
measured / predicted isolates what the model misses on this machine and backend (for generating,
in the part of a step that does not grow with the context, speed_model/predict.py `corrected_decode_seconds`:
a chat's replies are shallow, and scaled whole their correction over-shot 4K-deep steps). Each
ratio joins that backend's recent window (speed/measured.py `SpeedFactors`), whose median,
bounded, then corrects every later prediction, and the model's own window, which takes over for that model
once it holds two replies (planner/learned_factors.py). A reply is not learned from when it is too short to time
(the first tokens of a reply and tiny prompts are mostly fixed costs), when other programs took
a large share of the CPU meanwhile (speed/cpu_load.py): a busy machine says nothing about this
one, or when the pace gauge read right after it (speed/pace.py) ran well below its usual: a VM's
neighbours slow it with no program in sight, and replies read at such a moment teach a slow
machine (docs/speed-model.md, decision log, "The pace gauge").
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from vrampilot.planner.plan import Plan
from vrampilot.planner.speed_model.predict import (
    HEADLINE_PROMPT_TOKENS,
    SpeedModel,
    backend_key,
    calibration_model,
    corrected_decode_seconds,
    shallow_decode_ratio,
)
from vrampilot.speed import BUSY_SHARE, SLOW_PACE, LastReply, MachineSpeed

# Fewer generated tokens than this time too little to judge decoding.
MIN_DECODE_TOKENS = 8
# A prompt shorter than this is read in one partial ubatch, another regime than the long prompts a
# prefill factor matters for (the headline figure is for a prompt of this length, documents are
# longer): the weights' pass and fixed costs weigh more, and the speed model's share for them is
# less sure: learned from, short turns moved the predictions for long prompts both ways, so such
# prompts are not learned from (docs/speed-model.md, decision log, "How far replies move a
# prediction").
MIN_PREFILL_TOKENS = HEADLINE_PROMPT_TOKENS
# Decode time grows with the context; a reply's mean is taken over this many points of its span.
_DECODE_POINTS = 5


@dataclass(frozen=True)
class ReplyMeasurement:
    """What one reply measured (engine/stats.py GenerationStats, as plain numbers)."""

    prompt_tokens: int  # the whole conversation as the model saw it
    evaluated_tokens: int  # read this turn (the rest came from the cache)
    completion_tokens: int
    decode_tps: float
    prefill_tps: float
    others_cpu_share: float | None = None  # other programs' share of the CPU meanwhile
    pace_ms: float | None = None  # the pace gauge right after it (speed/pace.py; None: not read)


@dataclass(frozen=True)
class ReplyPrediction:
    decode_tps: float
    prefill_tps: float


def _decode_step_seconds(model: SpeedModel, reply: ReplyMeasurement) -> tuple[float, float]:
    """(mean step over the reply's generated tokens, the step with one token in the cache)."""
    # Generated tokens see the prompt plus those before them: the mean time over that span.
    start, span = reply.prompt_tokens, max(1, reply.completion_tokens)
    points = [start + span * (i + 0.5) / _DECODE_POINTS for i in range(_DECODE_POINTS)]
    return sum(model.decode_seconds(int(p)) for p in points) / len(points), model.decode_seconds(1)


def reply_prediction(plan: Plan, reply: ReplyMeasurement, *, calibrated: bool = True) -> ReplyPrediction:
    """The plan's speed for this reply's conditions; `calibrated=False` without the learned factors."""
    model = SpeedModel(plan.spec, plan.settings, plan.target, plan.memory)
    past = max(0, reply.prompt_tokens - reply.evaluated_tokens)
    n = max(1, reply.evaluated_tokens)
    t_pre = model.prefill_seconds(n, past)
    t_dec, t_shallow = _decode_step_seconds(model, reply)
    factors = plan.target.factors_for(backend_key(plan.target, plan.settings), _model(plan))
    fd, fp = (factors.decode, factors.prefill) if calibrated else (1.0, 1.0)
    t_dec = corrected_decode_seconds(t_dec, t_shallow, fd)
    return ReplyPrediction(
        decode_tps=1.0 / t_dec if t_dec > 0 else 0.0,
        prefill_tps=fp * n / t_pre if t_pre > 0 else 0.0,
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def learn_reply(speed: MachineSpeed, plan: Plan, reply: ReplyMeasurement, at: str | None = None) -> MachineSpeed:
    """`speed` with this reply learned (a pure function; `record_reply` also saves it).

    The prediction is remade with `speed` (this machine's current figures), not with those the plan
    was made with: a reply from a model loaded before the probe finished is still judged against
    the model that later predictions will use.
    """
    at = at or _now()
    plan = replace(plan, target=replace(plan.target, speed=speed))
    backend = backend_key(plan.target, plan.settings)
    before = reply_prediction(plan, reply)  # what the user was shown for it
    raw = reply_prediction(plan, reply, calibrated=False)
    threads = plan.settings.n_threads
    share = speed.pace_share(threads, reply.pace_ms) if reply.pace_ms is not None else None
    pace = round(share, 2) if share is not None else None  # as shown and stored
    set_aside = ""
    if reply.others_cpu_share is not None and reply.others_cpu_share > BUSY_SHARE:
        set_aside = f"other programs used {reply.others_cpu_share:.0%} of the CPU"
    elif pace is not None and pace < SLOW_PACE:
        set_aside = f"this machine ran at {pace:.0%} of its usual pace"
    decode_ratio = prefill_ratio = None
    if not set_aside and reply.completion_tokens >= MIN_DECODE_TOKENS and reply.decode_tps > 0 and raw.decode_tps > 0:
        # Learned for the part of a step that does not grow with the context (speed_model/predict.py
        # `corrected_decode_seconds`): the reply's step less the attention the model prices.
        t_step, t_shallow = _decode_step_seconds(SpeedModel(plan.spec, plan.settings, plan.target, plan.memory), reply)
        decode_ratio = shallow_decode_ratio(1.0 / reply.decode_tps, t_step, t_shallow)
    if not set_aside and reply.evaluated_tokens >= MIN_PREFILL_TOKENS and reply.prefill_tps > 0 and raw.prefill_tps > 0:
        prefill_ratio = reply.prefill_tps / raw.prefill_tps
    if not set_aside and decode_ratio is None and prefill_ratio is None:
        set_aside = "too short to time"
    # Learned twice: into the backend's factors over every model, and into this model's own.
    learned = [
        speed.factors_for(backend, m).learn(decode_ratio=decode_ratio, prefill_ratio=prefill_ratio, at=at)
        for m in ("", _model(plan))
    ]
    last = LastReply(
        model=_model(plan),
        backend=backend,
        at=at,
        # Rounded as stored, so the record read back equals the one returned.
        decode_tps=round(reply.decode_tps, 2),
        predicted_decode_tps=round(before.decode_tps, 2),
        prefill_tps=round(reply.prefill_tps, 2),
        predicted_prefill_tps=round(before.prefill_tps, 2),
        prompt_tokens=reply.evaluated_tokens,
        context_tokens=reply.prompt_tokens,
        pace_share=pace,
        set_aside=set_aside,
    )
    for factors in learned:
        speed = speed.with_factors(factors)
    if reply.pace_ms is not None:
        speed = speed.with_pace(threads, reply.pace_ms)
    return speed.with_last_reply(last)


def reply_pace_ms(plan: Plan) -> float | None:
    """The pace gauge at the plan's thread count, read right after one of its replies (None for a
    plan that generates on offload devices: the CPU's pace is not what it measures)."""
    if not backend_key(plan.target, plan.settings).startswith("cpu:"):
        return None
    from vrampilot.speed import measure_pace_ms

    return measure_pace_ms(plan.settings.n_threads)


def record_reply(speed: MachineSpeed, plan: Plan, reply: ReplyMeasurement) -> MachineSpeed:
    """Learn this reply and save it in this machine's record (re-read under the file's lock, so a
    reply learned by another process meanwhile is kept)."""
    from vrampilot.speed import update_machine_speed

    at = _now()
    return update_machine_speed(speed.fingerprint, lambda current: learn_reply(current, plan, reply, at))


def last_reply_for(plan: Plan) -> LastReply | None:
    """The last measured reply of this plan's model on its backend, for "predicted X, last measured Y"."""
    speed = plan.target.speed
    if speed is None:
        return None
    return speed.last_reply(_model(plan), backend_key(plan.target, plan.settings))


def _model(plan: Plan) -> str:
    """The model's own calibration key: its file, and its placement when split (speed_model/predict.py)."""
    return calibration_model(plan.spec, plan.settings, plan.target)
