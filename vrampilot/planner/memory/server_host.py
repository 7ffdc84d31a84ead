"""What llama-server keeps in host RAM beyond the engine's buffers, sized to what the host budget leaves.

The in-process engine (llama-cpp-python) allocates the model, its caches and its compute buffers,
all counted by breakdown.py. llama-server allocates more on the host, by default without limit on
what the plan left (tools/server of the vendored llama.cpp):

- The prompt cache (`--cache-ram N` MiB, default 8192; server_prompt_cache in server-task.h/.cpp).
  Before a slot takes a new task its state (llama_state_seq_get_data: the sequence's KV cells, and
  the draft context's) is copied into a host vector, and a cached prompt close to the new one is
  copied back. The limit is in bytes over everything the cache holds: server_prompt_cache_state::
  size() counts the state and the checkpoints stored with it, and alloc() evicts the oldest entries
  until `size() + new <= limit` before it allocates, skipping a state larger than the whole limit.
  Its token limit (n_ctx, raised to limit / bytes per token in update()) only evicts sooner. So
  the cache holds at most N MiB of state; what comes on top is a 4-byte token per cached token
  and list nodes, under 0.1% of a state (a token's KV row is hundreds of bytes and more).
- Context checkpoints (`--ctx-checkpoints N`, default 32 per slot; create_checkpoint in
  server-context.cpp): copies of the part of a slot's state that cannot be rolled back, i.e. the
  sliding-window cache (unless --swa-full) and recurrent states (llama_state_seq_get_data with
  LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY). Each slot keeps up to N of its own beside the KV cache;
  models with neither make none (do_checkpoint). On Gemma-3-27B one checkpoint is about 600 MiB,
  so the default 32 alone could take 19 GiB.
- The process itself: code and libraries, the HTTP server and web UI, the tokenizer's tables,
  one sampler per slot: PROCESS_BYTES, measured on this machine's llama-server (bench/server_ram.py).

The plan gives these what the host budget leaves after the engine's own allocations, checkpoints
first (up to half of it: they spare SWA and hybrid models a full re-read of the prompt on each
turn), then the prompt cache (the rest, up to llama.cpp's own default), and passes both on every
llama-server line (export/args.py), so the server can never take more than the plan counted.
They are not part of the engine's totals (Components): the app's own chat has no prompt cache,
and a cache sized to the slack would hide every alternative's memory cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.planner.memory.kv import KvBreakdown
from vrampilot.planner.settings import Settings
from vrampilot.units import MIB, format_bytes

LLAMA_CACHE_RAM_MIB = 8192  # common/common.h cache_ram_mib: llama-server's default --cache-ram
LLAMA_CTX_CHECKPOINTS = 32  # common/common.h n_ctx_checkpoints: its default --ctx-checkpoints
# llama-server's own resident memory beyond the buffers llama.cpp logs: RSS after loading the
# embedded model minus its mapped weights and buffers, rounded up (bench/server_ram.py measures it).
PROCESS_BYTES = 96 * MIB
CHECKPOINT_SHARE = 0.5  # of what the host budget leaves, at most this much for checkpoints


@dataclass(frozen=True)
class ServerHost:
    """llama-server's host allocations beyond the engine's (see the module's docstring)."""

    cache_ram_mib: int  # --cache-ram: the prompt cache's limit
    ctx_checkpoints: int  # --ctx-checkpoints: per slot
    checkpoint_bytes: int  # one checkpoint of one slot (0: the model makes none)
    slots: int  # -np
    process_bytes: int = PROCESS_BYTES
    reason: str = ""  # why the cache or the checkpoints are smaller than llama.cpp's defaults

    @property
    def cache_bytes(self) -> int:
        return self.cache_ram_mib * MIB

    @property
    def checkpoints_bytes(self) -> int:
        return self.slots * self.ctx_checkpoints * self.checkpoint_bytes

    @property
    def total_bytes(self) -> int:
        return self.cache_bytes + self.checkpoints_bytes + self.process_bytes

    def as_dict(self) -> dict[str, int | str]:
        return {
            "cache_ram_mib": self.cache_ram_mib,
            "cache": self.cache_bytes,
            "ctx_checkpoints": self.ctx_checkpoints,
            "checkpoint": self.checkpoint_bytes,
            "checkpoints": self.checkpoints_bytes,
            "process": self.process_bytes,
            "total": self.total_bytes,
            "reason": self.reason,
        }


def checkpoint_bytes(kv: KvBreakdown, settings: Settings) -> int:
    """One slot's checkpoint: its share of the sliding-window cache (none with --swa-full, where
    llama-server sets n_swa to 0 and makes no checkpoint for it) and of the recurrent states."""
    swa = 0 if settings.swa_full else kv.swa_bytes // max(kv.n_streams, 1)
    return swa + (kv.recurrent_bytes + kv.state_bytes) // max(settings.n_seq, 1)


def server_host(kv: KvBreakdown, settings: Settings, left_bytes: int) -> ServerHost:
    """The server's allocations within `left_bytes`, what the host budget leaves after the engine."""
    slots = max(settings.n_seq, 1)
    each = checkpoint_bytes(kv, settings)
    room = max(left_bytes - PROCESS_BYTES, 0)
    reasons = []
    n_ckpt = 0
    if each:
        n_ckpt = min(LLAMA_CTX_CHECKPOINTS, int(room * CHECKPOINT_SHARE) // (slots * each))
        if n_ckpt < LLAMA_CTX_CHECKPOINTS:
            reasons.append(
                f"{n_ckpt} context checkpoints of {format_bytes(each)} per slot, not llama.cpp's "
                f"{LLAMA_CTX_CHECKPOINTS}: that is what half the RAM left after the model holds"
            )
    cache_mib = min(LLAMA_CACHE_RAM_MIB, (room - slots * n_ckpt * each) // MIB)
    if cache_mib <= 0:
        reasons.append("prompt cache off (--cache-ram 0): the model leaves no RAM in the host budget for it")
    elif cache_mib < LLAMA_CACHE_RAM_MIB:
        reasons.append(
            f"prompt cache of {format_bytes(cache_mib * MIB)}, not llama.cpp's {format_bytes(LLAMA_CACHE_RAM_MIB * MIB)}: "
            "what the host budget leaves after the model"
        )
    return ServerHost(
        cache_ram_mib=max(cache_mib, 0),
        ctx_checkpoints=n_ckpt,
        checkpoint_bytes=each,
        slots=slots,
        reason="; ".join(reasons),
    )
