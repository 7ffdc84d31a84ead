"""The plan's types: what the user pinned, what the planner chose with its memory and speed, and
the alternatives beside it. Shared by the search that makes a plan, the reasons that explain it and
every caller that reads one; kept apart so none of them needs the search to name a Plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vrampilot.gguf import ModelSpec
from vrampilot.planner.compute import FORMULA, GraphEstimate
from vrampilot.planner.context_budget import ContextBudget, context_budget
from vrampilot.planner.errors import PlanError as PlanError  # where callers have always found it
from vrampilot.planner.families import is_routed
from vrampilot.planner.memory import MemoryBreakdown
from vrampilot.planner.settings import Settings
from vrampilot.planner.speed import SpeedPrediction
from vrampilot.planner.target import Target

if TYPE_CHECKING:
    from vrampilot.planner.draft_plan import DraftPlan

# The defaults a plan is chosen and explained against (the search, the reasons and the
# alternatives all read them).
DEFAULT_MAX_CTX = 32768
MIN_CTX = 512
# The largest context llama.cpp can take: its positions are 32-bit signed (llama_pos), llama-server
# reads -c into a C int, and it pads n_ctx up to a multiple of 256, so this is the last multiple of
# 256 below 2^31. No model is trained anywhere near it (the longest, 10M tokens); a larger --ctx is
# a typo, refused before anything is sized (ctypes would also wrap it silently into 32 bits).
MAX_CTX = (1 << 31) - 256
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
    draft: DraftPlan | None = None  # speculative decoding (planner/draft.py), None without
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
