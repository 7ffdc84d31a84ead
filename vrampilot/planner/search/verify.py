"""Check a finished plan against llama.cpp's own dry run (no_alloc: allocations simulated).

The compute buffer has no closed formula (llama.cpp measures its worst-case graph): the model in
compute.py is a fit, and plans made with exact=True (the CLI's default) already carry llama.cpp's
own number for their settings. This loads the model afresh and asks llama.cpp for the plan's KV,
compute and output sizes, and reports any difference, including the formula's own error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vrampilot.planner.dry_run.measure import dry_run_plan
from vrampilot.planner.memory.compute import compute_buffer_bytes, formula_graph_bytes
from vrampilot.planner.plan import Plan


@dataclass(frozen=True)
class Verification:
    kv_predicted_bytes: int
    kv_llama_bytes: int
    compute_predicted_bytes: int
    compute_llama_bytes: int
    compute_formula_bytes: int  # the fitted formula alone (what the search starts from)
    output_predicted_bytes: int
    output_llama_bytes: int
    refused: str | None
    seconds: float

    @staticmethod
    def _pct(pred: int, real: int) -> float:
        return 100.0 * (pred - real) / real if real else 0.0

    @property
    def compute_error_pct(self) -> float:
        return self._pct(self.compute_predicted_bytes, self.compute_llama_bytes)

    @property
    def kv_error_pct(self) -> float:
        return self._pct(self.kv_predicted_bytes, self.kv_llama_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kv": {"predicted": self.kv_predicted_bytes, "llama_cpp": self.kv_llama_bytes},
            "compute": {
                "predicted": self.compute_predicted_bytes,
                "llama_cpp": self.compute_llama_bytes,
                "formula": self.compute_formula_bytes,
            },
            "output": {"predicted": self.output_predicted_bytes, "llama_cpp": self.output_llama_bytes},
            "compute_error_pct": round(self.compute_error_pct, 2),
            "kv_error_pct": round(self.kv_error_pct, 3),
            "refused": self.refused,
            "seconds": round(self.seconds, 3),
        }


def verify_plan(plan: Plan) -> Verification:
    """llama.cpp's numbers for this plan as the CPU build of this machine allocates them.

    On a GPU the same graph is split between the device and a smaller host buffer; the dry run
    here cannot see that split, so the comparison is of the totals the CPU build reserves.
    """
    real = dry_run_plan(plan.spec.path, plan.settings)
    return Verification(
        kv_predicted_bytes=plan.memory.kv.total_bytes,
        kv_llama_bytes=real.kv_bytes,
        compute_predicted_bytes=compute_buffer_bytes(plan.spec, plan.settings, device="cpu", graph=plan.graph),
        compute_llama_bytes=real.compute_bytes,
        compute_formula_bytes=formula_graph_bytes(plan.spec, plan.settings),
        output_predicted_bytes=plan.memory.host.output_bytes,
        output_llama_bytes=real.output_bytes,
        refused=real.refused,
        seconds=real.seconds,
    )
