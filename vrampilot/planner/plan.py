"""The plan's types: what the user pinned, what the planner chose with its memory and speed, the
draft it carries and the alternatives beside it. Shared by the search that makes a plan, the reasons
that explain it and every caller that reads one; a floor below the search (search/draft.py makes
the DraftPlan), so none of them needs the search to name a Plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vrampilot.gguf import ModelSpec
from vrampilot.planner.context_budget import ContextBudget, context_budget
from vrampilot.planner.families import is_routed
from vrampilot.planner.memory.breakdown import Components, MemoryBreakdown
from vrampilot.planner.memory.compute import FORMULA, GraphEstimate
from vrampilot.planner.settings import Settings
from vrampilot.planner.speed_model.predict import SpeedPrediction
from vrampilot.planner.target import Target
from vrampilot.speed import Acceptance

# The defaults a plan is chosen and explained against (the search, the reasons and the
# alternatives all read them).
DEFAULT_MAX_CTX = 32768
MIN_CTX = 512
# The largest context llama.cpp can take: its positions are 32-bit signed (llama_pos), llama-server
# reads -c into a C int, and it pads n_ctx up to a multiple of 256, so this is the last multiple of
# 256 below 2^31. No model is trained anywhere near it (the longest, 10M tokens); a larger --ctx is
# a typo, refused before anything is sized (ctypes would also wrap it silently into 32 bits).
MAX_CTX = (1 << 31) - 256
# ggml's GGML_MAX_N_THREADS: more threads crash llama.cpp (the search and the --threads parser refuse more).
MAX_THREADS = 512
# Same-type pairs that default CUDA builds have flash-attention kernels for, in order of quality.
PREFERRED_KV = ("f16", "q8_0", "q4_0")
DEFAULT_UBATCH = 512
DEFAULT_BATCH = 2048
FULL_PRECISION_KV = frozenset({"f16", "bf16", "f32"})  # K/V cache types that are not quantized


@dataclass(frozen=True)
class Pins:
    """What the user fixed. None means: the planner chooses."""

    n_ctx: int | None = None
    type_k: str | None = None
    type_v: str | None = None
    n_gpu_layers: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    n_threads: int | None = None
    n_threads_batch: int | None = None
    flash_attn: bool | None = None
    swa_full: bool | None = None
    tensor_split: tuple[float, ...] | None = None  # shares per offload device, in the target's order
    # Mixture of experts: the routed experts of the first n_cpu_moe layers stay in RAM (--n-cpu-moe).
    n_cpu_moe: int | None = None
    # True: every layer's routed experts in RAM (llama.cpp's --cpu-moe); False: none of them (all
    # on the GPU, no whole-layer split either); None: the planner places them.
    cpu_experts: bool | None = None
    min_ctx: int | None = None  # at least this context, when the planner chooses it
    keep_free_bytes: int | None = None  # left unused on every offload device (its margin)
    cpu_tensor_patterns: tuple[str, ...] | None = None  # the user's own -ot PATTERN=CPU
    mmproj_path: str | None = None  # a vision projector loaded with the model
    mmproj_cpu: bool | None = None  # True: the projector stays on the CPU (--no-mmproj-offload)
    # Tokens the enabled tools' schemas take in every prompt (vrampilot.engine.tool_tokens counts
    # them with the model's template and tokenizer): not a llama.cpp setting, a share of the
    # context the conversation cannot use, which the plan's context budget shows.
    tools_tokens: int | None = None

    def pinned(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Alternative:
    label: str
    settings: Settings
    memory: MemoryBreakdown
    fits: bool
    speed: SpeedPrediction
    refused: str | None = None

    @property
    def memory_total_bytes(self) -> int:
        return self.memory.device.total_bytes if self.memory.device.total_bytes else self.memory.host.total_bytes


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


@dataclass(frozen=True)
class Plan:
    spec: ModelSpec
    target: Target
    pins: Pins
    settings: Settings
    memory: MemoryBreakdown
    fits: bool
    speed: SpeedPrediction
    reasons: tuple[str, ...]
    alternatives: tuple[Alternative, ...] = ()
    refused: str | None = None  # llama.cpp would refuse these settings (only possible when pinned)
    suggestion: str | None = None  # when nothing fits: what would
    warnings: tuple[str, ...] = field(default=())
    graph: GraphEstimate = FORMULA  # how the compute buffer was sized (see compute.GraphEstimate)
    exact: bool = False  # asked llama.cpp for the compute buffer (plan(exact=True))
    draft: DraftPlan | None = None  # speculative decoding (planner/search/draft.py), None without
    # The target as asked, before a keep_free_bytes pin changed its margins (replan_with plans
    # for it again, so that another pin starts from the same machine); None: `target` itself.
    asked_target: Target | None = None

    @property
    def context_budget(self) -> ContextBudget:
        """The planned context split between the enabled tools' schemas and the conversation."""
        return context_budget(self.settings.n_ctx, self.pins.tools_tokens)

    @property
    def compute_source(self) -> str:
        """ "llama.cpp" when the chosen settings' compute buffer is llama.cpp's own number."""
        return "llama.cpp" if self.graph.is_measured(self.settings) else "estimate"

    @property
    def kv_source(self) -> str:
        """ "llama.cpp" when the chosen settings' KV cache is llama.cpp's count (an architecture the
        formula is not verified on, planner/families.py), "formula" when the formula is verified on
        this architecture, "estimate" when it is not and llama.cpp could not be asked."""
        if self.graph.is_counted(self.settings):
            return "llama.cpp"
        return "estimate" if is_routed(self.spec.architecture) else "formula"

    @property
    def device_budget_bytes(self) -> int:
        return self.target.device_budget_bytes

    @property
    def host_budget_bytes(self) -> int:
        return self.target.host_ram_bytes
