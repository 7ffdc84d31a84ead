"""The llama.cpp settings a plan chooses. One frozen value passed to the engine and the export."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

# Cache types llama.cpp accepts for -ctk/-ctv (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
QUANTIZED_KV_TYPES = frozenset({"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})


@dataclass(frozen=True)
class Settings:
    n_ctx: int
    type_k: str = "f16"
    type_v: str = "f16"
    n_gpu_layers: int = 0
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 4
    n_threads_batch: int = 4
    flash_attn: bool = True
    swa_full: bool = False
    n_seq: int = 1

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("n_seq")
        return d
