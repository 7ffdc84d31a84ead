"""The pins refused before the search starts: values llama.cpp cannot take, a placement this file
cannot have, expert pins that contradict each other. Checked once, so the search only ever weighs
pins that some plan can honour; what the pins leave to the planner is the search's (choose.py).
"""

from __future__ import annotations

from vrampilot.gguf import ModelSpec
from vrampilot.planner.errors import PlanError
from vrampilot.planner.memory.placement import check_placement
from vrampilot.planner.plan import MAX_CTX, MAX_THREADS, Pins
from vrampilot.planner.settings import KV_CACHE_TYPES


def check_pins(spec: ModelSpec, pins: Pins) -> None:
    """Refuse pins no plan can honour, before anything is sized: each PlanError says which and why."""
    check_placement(spec, pins.n_cpu_moe, pins.cpu_tensor_patterns or ())
    for name in ("type_k", "type_v"):
        v = getattr(pins, name)
        if v is not None and v not in KV_CACHE_TYPES:
            raise PlanError(f"unknown cache type {v!r} for {name}; llama.cpp accepts {', '.join(KV_CACHE_TYPES)}")
    if pins.n_ctx is not None and pins.n_ctx < 1:
        raise PlanError("context length must be positive")
    for name, what in (("n_ctx", "context"), ("min_ctx", "least context")):
        v = getattr(pins, name)
        if v is not None and v > MAX_CTX:
            raise PlanError(f"a {what} of {v} tokens is more than llama.cpp can take (at most {MAX_CTX})")
    for name in ("n_batch", "n_ubatch", "n_threads", "n_threads_batch"):
        v = getattr(pins, name)
        if v is not None and v < 1:
            raise PlanError(f"{name} must be at least 1")
    for name in ("n_threads", "n_threads_batch"):
        v = getattr(pins, name)
        if v is not None and v > MAX_THREADS:
            # Past ggml's limit llama.cpp crashes (or OpenMP aborts) instead of refusing.
            raise PlanError(f"{name} must be at most {MAX_THREADS} (llama.cpp's limit)")
    if pins.n_gpu_layers is not None and pins.n_gpu_layers < 0:
        raise PlanError("GPU layers must be 0 or more")
    if pins.min_ctx is not None:
        if pins.min_ctx < 1:
            raise PlanError("the least context must be positive")
        if pins.n_ctx is not None and pins.n_ctx < pins.min_ctx:
            raise PlanError(f"context {pins.n_ctx} is less than the least context {pins.min_ctx} asked for")
    if pins.tools_tokens is not None and pins.tools_tokens < 0:
        raise PlanError("the tools' tokens must be 0 or more")
    if pins.keep_free_bytes is not None and pins.keep_free_bytes < 0:
        raise PlanError("the memory kept free per device must be 0 or more")
    _check_experts(spec, pins)


def _check_experts(spec: ModelSpec, pins: Pins) -> None:
    """The expert pins: a count llama.cpp can apply to this file, and no two that contradict."""
    moe = bool(spec.layer_expert_bytes)
    n = pins.n_cpu_moe
    # The count's range is placement.check_placement's (called first, in check_pins).
    if n is not None and n > 0 and not moe:
        raise PlanError("this model has no routed experts: --n-cpu-moe would keep nothing in RAM")
    if pins.cpu_experts and not moe:
        raise PlanError("this model has no routed experts to keep in RAM")
    if pins.cpu_experts is not None and n is not None and n != (spec.n_layer if pins.cpu_experts else 0):
        which = "every layer's experts in RAM" if pins.cpu_experts else "no experts in RAM"
        raise PlanError(f"--n-cpu-moe {n} contradicts the pin of {which}")
    if pins.cpu_experts is False and moe and pins.n_gpu_layers is not None and pins.n_gpu_layers <= spec.n_layer:
        raise PlanError(
            f"no experts in RAM needs every layer on the GPU (-ngl {spec.n_layer + 1}); "
            f"-ngl {pins.n_gpu_layers} leaves some layers' experts on the CPU"
        )


def pinned_cpu_moe(spec: ModelSpec, pins: Pins) -> int | None:
    """n_cpu_moe when the pins decide it, None when the planner places the experts."""
    if pins.cpu_experts:
        return spec.n_layer
    if pins.n_cpu_moe is not None:
        return pins.n_cpu_moe
    if pins.cpu_experts is False or not spec.layer_expert_bytes:
        return 0
    return None
