"""How far what replies taught moves a prediction: the factors a plan's speed is multiplied by.

speed/measured.py keeps what replies measured (`SpeedFactors`: measured / predicted, per backend
and per model, the last few of each); this module decides what a prediction makes of them: their
median, weighed against the probe's own figures where the probe measured the backend, bounded,
and the model's own replies once there are enough of them, else the backend's over every model.
Method and error ranges: docs/speed-model.md, decision log ("How far replies move a prediction",
"A model's own window").
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from vrampilot.speed import MachineSpeed, SpeedFactors

# A factor outside these bounds means the model, not the machine, is wrong: clamp and let the
# prediction say it is calibrated rather than trust a runaway.
FACTOR_MIN, FACTOR_MAX = 0.5, 2.0
# A model's own replies correct its predictions once they are this many (for decoding and for
# prompts apart); until then the backend's replies over every model do: one model's error is not
# another's. Measurements: docs/speed-model.md, decision log, "A model's own window".
MODEL_MIN_REPLIES = 2
# On a backend the probe measured (the CPU), its prediction weighs as this many replies: a factor
# learned from n replies moves the prediction n / (n + 2) of the way (in log) to their median, so a
# few noisy replies do not undo a probe that was already right. Nothing measured a GPU: replies
# there are followed whole. Method and error ranges: docs/speed-model.md, decision log, "How far
# replies move a prediction".
PROBE_PRIOR_REPLIES = 2.0


@dataclass(frozen=True)
class LearnedFactors:
    """What a prediction on `backend` multiplies its speeds by (1.0: nothing learned)."""

    backend: str  # "cpu:haswell, 2 threads", "gpu:NVIDIA GeForce RTX 4090 (CUDA0)", ...
    decode: float = 1.0
    prefill: float = 1.0
    n_replies: int = 0  # the replies behind them (the more of decoding's and prompts')
    model: str = ""  # the GGUF file's name when any part is the model's own replies ("": the backend's)


def prior_replies(speed: MachineSpeed | None, backend: str) -> float:
    """How many replies a prediction on `backend` weighs as against what replies taught: the
    probe's figures for the CPU, none where nothing was measured (a GPU; a CPU never probed)."""
    return PROBE_PRIOR_REPLIES if speed is not None and speed.probe is not None and backend.startswith("cpu:") else 0.0


def median_factor(ratios: tuple[float, ...], prior: float = 0.0) -> float:
    """The median of `ratios` moved n / (n + prior) of the way from 1 (in log), then bounded."""
    if not ratios:
        return 1.0
    n = len(ratios)
    factor: float = statistics.median(ratios) ** (n / (n + prior))
    return min(FACTOR_MAX, max(FACTOR_MIN, factor))


def window_factors(speed: MachineSpeed, window: SpeedFactors) -> LearnedFactors:
    """One stored window of `speed` (a backend's, or one model's on it) as a prediction weighs it:
    what `vrampilot doctor` shows for each."""
    prior = prior_replies(speed, window.backend)
    return LearnedFactors(
        window.backend,
        median_factor(window.decode_ratios, prior),
        median_factor(window.prefill_ratios, prior),
        window.n_replies,
        window.model,
    )


def learned_factors(speed: MachineSpeed | None, backend: str, model: str = "") -> LearnedFactors:
    """The factors a prediction for `model` (a GGUF file's name) on `backend` uses: for decoding
    and for prompts apart, the model's own replies once there are MODEL_MIN_REPLIES of them, else
    the backend's over every model (`speed` None: nothing learned)."""
    if speed is None:
        return LearnedFactors(backend)
    shared = speed.factors_for(backend)
    own = speed.factors_for(backend, model) if model else SpeedFactors(backend)
    own_decode = len(own.decode_ratios) >= MODEL_MIN_REPLIES
    own_prefill = len(own.prefill_ratios) >= MODEL_MIN_REPLIES
    decode = own.decode_ratios if own_decode else shared.decode_ratios
    prefill = own.prefill_ratios if own_prefill else shared.prefill_ratios
    prior = prior_replies(speed, backend)
    return LearnedFactors(
        backend,
        median_factor(decode, prior),
        median_factor(prefill, prior),
        max(len(decode), len(prefill)),
        model if own_decode or own_prefill else "",
    )
