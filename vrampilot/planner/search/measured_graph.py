"""The search's own dry run: llama.cpp's compute buffers for the chosen settings, by the planner's
labels, learned into the graph estimate so every other configuration the search and the
alternatives price is corrected by the same measured/formula ratio (memory/compute.py
`GraphEstimate`). The draft (draft.py) asks it for the draft model's graph too.
"""

from __future__ import annotations

from vrampilot.gguf import ModelSpec
from vrampilot.planner.dry_run.graph import graph_compute
from vrampilot.planner.dry_run.log_lines import PRINT_RESOLUTION_BYTES
from vrampilot.planner.families import is_routed
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.memory.compute import FORMULA, GRAPH, HOST, GraphEstimate, dry_run_surplus_bytes
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target


def measured_graph(spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate) -> GraphEstimate | None:
    """Ask llama.cpp for the compute buffers of `s` (see dry_run/graph.py graph_compute): on the target's
    own devices when this machine has them, else the whole graph on the CPU."""
    on_devices = target.devices_here and s.n_gpu_layers > 0 and all(gpu.llama_name for gpu in target.gpus)
    devices = tuple(gpu.llama_name or "" for gpu in target.gpus)
    m = graph_compute(spec.path, s, devices if on_devices else None)
    if m is None or m.refused:
        return None
    if is_routed(spec.architecture):
        g = g.count(spec, s, m.kv_bytes, m.output_bytes, PRINT_RESOLUTION_BYTES * max(m.kv_lines, 1))
    if not on_devices:
        whole = FORMULA.graph_bytes(spec, s)
        return g.learn(s, {GRAPH: m.total_bytes}, whole)
    buffers, formula_bytes = _device_buffers(spec, target, s, m.compute_bytes)
    plain = s.with_(n_cpu_moe=0, cpu_tensor_patterns=())
    if plain != s and any(c.compute_bytes > 0 for c in memory_breakdown(spec, s, target, FORMULA).per_device):
        # Weights kept in host memory are copied into a device's compute buffer for prefill, in
        # part: llama.cpp's allocator lays some of the copy over dead activations (94 MiB of a
        # 1 GiB expert tensor stay on DeepSeek-V2-Lite, none on gpt-oss-20b). The formula adds the
        # whole tensor as a bound, unscaled; the ratio that corrects the graph for every other
        # configuration comes from the same settings without the overrides, and `s` keeps its own
        # measured buffers.
        mp = graph_compute(spec.path, plain, devices)
        if mp is not None and not mp.refused:
            g = g.learn(plain, *_device_buffers(spec, target, plain, mp.compute_bytes))
            return g.record(s, buffers)
    return g.learn(s, buffers, formula_bytes)


def _device_buffers(
    spec: ModelSpec, target: Target, s: Settings, compute_bytes: dict[str, int]
) -> tuple[dict[str, int], int]:
    """A dry run's compute buffers by the planner's labels (each device's buffer name, HOST for
    the host side), and the formula's total for the same buffers."""
    formula = memory_breakdown(spec, s, target, FORMULA)
    names = [gpu.buffer_name or gpu.name for gpu in target.gpus]
    buffers: dict[str, int] = {}
    for name, n in compute_bytes.items():
        label = name if name in names else HOST  # CPU, CUDA_Host, ...: the host side
        if formula.pipelined and label in names[1:] and formula.device_layers(names.index(label)):
            n -= dry_run_surplus_bytes(spec, s)  # the dry run's over-count on later devices
        buffers[label] = buffers.get(label, 0) + n
    return buffers, formula.device.compute_bytes + formula.host.compute_bytes
