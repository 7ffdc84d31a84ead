"""Is there room to load this plan in this process, before llama.cpp tries?

llama.cpp aborts the whole process when one of its host allocations fails
(`GGML_ASSERT(ctx->mem_buffer != NULL)`), and llama-cpp-python's own arrays fail with numpy's
MemoryError: neither leaves a message a user can act on, and the first kills the app. Both happen
when the process may not grow enough, by the address-space limit of the process (ulimit -v,
`prlimit --as`, containers) or by the memory the system has left. So the engine checks the plan's
host side against both first and, when it does not fit, raises the same AllocationError a failed
llama.cpp allocation raises, which the back-off answers with a smaller plan.
"""

from __future__ import annotations

import os
import sys

import psutil

from vrampilot.engine.errors import AllocationError
from vrampilot.planner.plan import Plan
from vrampilot.units import MIB, format_bytes

# Thread stacks, llama.cpp's small allocations, Python objects made while loading.
SLACK_BYTES = 96 * MIB


def host_allocation_bytes(plan: Plan) -> int:
    """What loading allocates on the host besides mapping the file: KV, compute and output
    buffers, and llama-cpp-python's logits array (n_batch x n_vocab floats, freed right after)."""
    host = plan.memory.host
    s = plan.settings
    total = host.kv_bytes + host.compute_bytes + host.output_bytes + 4 * s.n_batch * plan.spec.n_vocab + 4 * s.n_ctx
    if plan.draft is not None and plan.draft.memory is not None and plan.draft.spec is not None:
        # A draft model is a second load: its own host buffers and llama-cpp-python's arrays.
        d = plan.draft.memory.host
        total += d.kv_bytes + d.compute_bytes + d.output_bytes + 4 * s.n_batch * plan.draft.spec.n_vocab + 4 * s.n_ctx
    return total


def _address_space_left() -> int | None:
    if sys.platform == "win32":
        return None
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    vms: int = psutil.Process(os.getpid()).memory_info().vms
    return soft - vms


def check_headroom(plan: Plan) -> None:
    """Raise AllocationError when this process cannot grow enough to load `plan`."""
    alloc = host_allocation_bytes(plan) + SLACK_BYTES
    mapped = plan.spec.file_bytes  # every part of a split model is mapped
    if plan.draft is not None and plan.draft.spec is not None:
        mapped += plan.draft.spec.file_bytes
    left = _address_space_left()
    if left is not None and alloc + mapped > left:
        raise AllocationError(
            f"this process may use {format_bytes(left)} more address space (its limit, e.g. ulimit -v), and "
            f"loading needs {format_bytes(alloc + mapped)} ({format_bytes(mapped)} to map the file)"
        )
    available = psutil.virtual_memory().available
    if alloc > available:
        raise AllocationError(
            f"the system has {format_bytes(available)} of memory left and loading allocates {format_bytes(alloc)}"
        )
