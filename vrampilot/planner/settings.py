"""The llama.cpp settings a plan chooses. One frozen value passed to the engine and the export."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

# Cache types llama.cpp accepts for -ctk/-ctv (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
QUANTIZED_KV_TYPES = frozenset({"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})
# Speculative decoding kinds a plan can carry (Settings.spec_type).
SPEC_TYPES = ("draft", "ngram", "mtp")
DRAFT_FIELDS = (
    "spec_type",
    "draft_model",
    "draft_n_max",
    "draft_n_min",
    "draft_gpu_layers",
    "draft_device",
    "draft_type_k",
    "draft_type_v",
)


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
    # Weights in ggml-cpu's plain buffers, never repacked into its extra buffer types (llama-server's
    # --no-repack): set by the search where an extra buffer type cannot run an op the graph gives
    # its weight (placement.no_repack_reason).
    no_repack: bool = False
    n_seq: int = 1
    # Several offload devices: each one's share of the offloaded layers (-ts), in the target's
    # device order; () when there is one device (or llama.cpp's default split applies).
    tensor_split: tuple[float, ...] = ()
    # The devices, as llama-server names them (--device), and the RPC hosts they include (--rpc).
    devices: tuple[str, ...] = ()
    rpc_servers: tuple[str, ...] = ()
    # Mixture of experts: the routed experts of the first n_cpu_moe layers stay in host memory
    # (llama.cpp's --n-cpu-moe), while the rest of those layers (attention, norms, shared experts)
    # and their KV cache go where -ngl puts them.
    n_cpu_moe: int = 0
    # Tensor-name patterns (std::regex, searched) whose tensors stay in host memory: the user's
    # own `-ot PATTERN=CPU`. Experts are placed with n_cpu_moe; this is for anything else.
    cpu_tensor_patterns: tuple[str, ...] = ()
    # A vision projector (mmproj GGUF) loaded beside the model, and whether it stays on the CPU
    # (llama.cpp's --no-mmproj-offload); planner/memory/projector.py counts it where llama.cpp puts it.
    mmproj_path: str = ""
    mmproj_cpu: bool = False
    # Speculative decoding (planner/search/draft.py): "" none, "draft" a draft model (draft_model, a GGUF
    # path), "ngram" prompt-lookup drafting from the tokens already in the context, "mtp" the
    # model's own multi-token-prediction block (llama-server's --spec-type draft-mtp: a second
    # context of type MTP over the same weights, with the MTP block loaded). llama.cpp
    # creates the draft's context with the target's n_ctx, n_batch, n_ubatch and flash attention
    # (common/speculative.cpp), so only these differ: how many tokens it drafts per step, its
    # cache types (-ctkd/-ctvd), its offloaded layers (-ngld) and its device (-devd; "none": CPU).
    spec_type: str = ""
    draft_model: str = ""
    draft_n_max: int = 0
    draft_n_min: int = 0
    draft_gpu_layers: int = 0
    draft_device: str = ""
    draft_type_k: str = "f16"
    draft_type_v: str = "f16"
    # A context past the trained one (planner/memory/rope.py): YaRN RoPE scaling by rope_scale from the
    # original yarn_orig_ctx (--rope-scaling yarn --rope-scale --yarn-orig-ctx); 0: the model's own.
    rope_scale: float = 0.0
    yarn_orig_ctx: int = 0
    # llama-server's host allocations beyond the engine's (planner/memory/server_host.py): its prompt
    # cache limit in MiB (--cache-ram) and context checkpoints per slot (--ctx-checkpoints). The
    # plan sizes them to what the host budget leaves; 0 (off) in settings no plan sized.
    cache_ram_mib: int = 0
    ctx_checkpoints: int = 0

    @property
    def drafting(self) -> bool:
        return self.spec_type in SPEC_TYPES and self.draft_n_max > 0

    @property
    def drafts_mtp(self) -> bool:
        """Drafts with the model's own MTP block (the file must have one: planner/search/draft.py checks)."""
        return self.drafting and self.spec_type == "mtp"

    @property
    def rollback_snapshots(self) -> int:
        """Rollback snapshots per sequence of recurrent and compressor state (llama_context_params
        .n_rs_seq): llama-server asks draft_n_max of them when it drafts with MTP
        (common_params_speculative::need_n_rs_seq), none otherwise."""
        return self.draft_n_max if self.drafts_mtp else 0

    @property
    def n_outputs_max(self) -> int:
        """Logit rows a ubatch may ask for: one per sequence, as llama-server sets it (n_parallel,
        server_output_limits in tools/server/server-context.cpp, without speculative decoding).
        llama.cpp sizes the compute buffer for this many rows of n_vocab logits; its own default
        (0: n_batch) would reserve a row per token, hundreds of MiB on large vocabularies that
        the engine never reads (it samples the last token only). The engine, the planner's dry
        runs and the exported llama-server line thus reserve the same buffer.

        Drafting verifies the sampled token and draft_n_max drafted ones in one batch, each with
        its logits: llama-server reserves n_seq * (1 + n_max) rows, at most n_batch
        (common_speculative_get_output_limits)."""
        rows = max(1, self.n_seq)
        if self.drafting:
            rows = min(self.n_batch, rows * (1 + self.draft_n_max))
        return max(1, rows)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    def mtp_context(self) -> Settings:
        """The MTP draft context llama-server creates beside this one (common/speculative.cpp,
        common_base_params_to_speculative): the same model, n_ctx, batches, sequences and flash
        attention, but the draft's cache types (-ctkd/-ctvd), one logit row per sequence and no
        rollback snapshots, i.e. these settings without drafting."""
        return replace(self, type_k=self.draft_type_k, type_v=self.draft_type_v, spec_type="", draft_n_max=0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("n_seq")
        # llama-server's own host memory is the plan's memory table's (memory.server), not a setting.
        d.pop("cache_ram_mib")
        d.pop("ctx_checkpoints")
        for key in ("tensor_split", "devices", "rpc_servers", "cpu_tensor_patterns"):
            if d[key]:
                d[key] = list(d[key])
            else:
                del d[key]  # one device: the JSON stays as it was
        if not d["n_cpu_moe"]:
            del d["n_cpu_moe"]
        if not d["no_repack"]:
            del d["no_repack"]  # weights repacked as llama.cpp does by default: the JSON stays as it was
        if not d["rope_scale"]:
            del d["rope_scale"], d["yarn_orig_ctx"]  # no context past the trained one: the JSON stays as it was
        if not d["mmproj_path"]:
            del d["mmproj_path"], d["mmproj_cpu"]  # no projector: the JSON stays as it was
        if not self.drafting:  # without drafting the JSON stays as it was
            for key in DRAFT_FIELDS:
                del d[key]
        return d

    @property
    def projector_on_cpu(self) -> bool:
        """The projector stays on the CPU: asked for, or a plan that offloads no layer (llama.cpp
        would otherwise put it on the first GPU even with -ngl 0, so a CPU plan says so)."""
        return self.mmproj_cpu or self.n_gpu_layers <= 0

    @property
    def server_only(self) -> str:
        """Why this plan runs only in a llama-server process, never in the app's own ("": it may
        run in either), as the end of a sentence: RPC hosts (ggml aborts the process that uses a
        host which goes away), or MTP drafting (llama-cpp-python has no MTP drafter: its
        draft_model= interface sees tokens, not the hidden state the MTP block drafts from)."""
        if self.uses_rpc:
            return "it uses RPC hosts"
        if self.drafts_mtp:
            return "it drafts with the model's MTP block, which only llama-server does"
        return ""

    @property
    def uses_rpc(self) -> bool:
        """Runs across RPC hosts: only in a llama-server process (ggml aborts its process when a
        host goes away, which the app must survive)."""
        return bool(self.rpc_servers) and self.n_gpu_layers > 0
