"""Where a plan puts a model on a machine, in one word: the one rule the library and the hub share.

A plan that does not fit is "too large"; with a GPU in the target, every layer there (the blocks
and the output layer, llama.cpp's -ngl count) is "GPU", some is "partial", none is "CPU"; without
a GPU it is "CPU".
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vrampilot.planner.plan import Plan


class Fit(StrEnum):
    GPU = "gpu"  # every layer on the GPU
    PARTIAL = "partial"  # some layers on the CPU
    CPU = "cpu"  # no GPU, or not one layer fits there
    TOO_LARGE = "too_large"


FIT_LABELS = {
    Fit.GPU: "Fits on GPU",
    Fit.PARTIAL: "Partial offload",
    Fit.CPU: "CPU only",
    Fit.TOO_LARGE: "Too large",
}


def classify_fit(plan: Plan) -> Fit:
    if not plan.fits:
        return Fit.TOO_LARGE
    total = plan.spec.n_layer + 1
    layers = plan.settings.n_gpu_layers
    if plan.target.has_gpu and layers >= total:
        return Fit.GPU
    if plan.target.has_gpu and layers > 0:
        return Fit.PARTIAL
    return Fit.CPU
