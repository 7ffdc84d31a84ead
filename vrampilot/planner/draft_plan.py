"""The draft a plan carries (planner/draft.py makes it): kept apart from the planning so that the
plan's own types (planner/plan.py) can name it without importing the search."""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory import Components, MemoryBreakdown
from vrampilot.planner.settings import Settings
from vrampilot.speed.acceptance import Acceptance


@dataclass(frozen=True)
class DraftPlan:
    """The draft a plan carries: its memory per device, and the speed-up it predicts."""

    kind: str
    n_draft: int
    acceptance: Acceptance  # measured on this machine, or the prior (acceptance.measured says which)
    speedup: float  # predicted decode speed with drafting over the plan's own, same context
    decode_tps: float  # the plan's decode speed with drafting
    draft_tps: float  # the draft model's own decode speed (0 for n-gram drafting)
    spec: ModelSpec | None = None  # the draft model (None for n-gram drafting)
    settings: Settings | None = None  # the draft context's own settings
    memory: MemoryBreakdown | None = None
    device: str = "CPU"  # where the draft's layers are: "CPU" or the device's label
    extra_target_compute_bytes: int = 0  # the target's compute buffer grown by the verify batch
    device_names: tuple[str, ...] = ()  # llama.cpp's buffer names of memory.per_device
    # The arithmetic's terms (seconds, calibrated target steps): a reply's speed is judged by them
    # with its own acceptance (learn_acceptance).
    t_target_s: float = 0.0
    t_draft_s: float = 0.0
    t_verify_s: float = 0.0

    def bytes_by_device(self) -> dict[str, int]:
        """The draft model's bytes per device, as llama.cpp names them ("CPU", "CUDA0", ...):
        weights, KV, compute and output, without any margin (the target's device keeps its own)."""
        if self.memory is None:
            return {}
        out: dict[str, int] = {}
        host = without_margin(self.memory.host)
        if host:
            out["CPU"] = host
        for i, c in enumerate(self.memory.per_device):
            name = self.device_names[i] if i < len(self.device_names) else f"GPU{i}"
            out[name] = out.get(name, 0) + without_margin(c)
        return out

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_device().values())


def without_margin(c: Components) -> int:
    """A component set's bytes without the device's margin (the model's device keeps its own)."""
    return c.total_bytes - c.margin_bytes
