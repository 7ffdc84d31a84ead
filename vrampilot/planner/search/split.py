"""Several devices: which llama.cpp is told to use (--device, --rpc) and the split of the layers
between them (-ts), so that no card fills up while another has room.
"""

from __future__ import annotations

import bisect
import itertools

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory.breakdown import memory_breakdown
from vrampilot.planner.memory.compute import GraphEstimate
from vrampilot.planner.plan import Pins
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target


def device_settings(target: Target) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """--device and --rpc for a target of several devices or RPC hosts, or whose backend was chosen
    among several (hardware/cards.py: llama.cpp's default would take another backend's device, or
    one per backend of the same card); one local GPU otherwise: neither, llama.cpp's default is it."""
    gpus = target.gpus
    if len(gpus) < 2 and not any(g.kind == "rpc" for g in gpus) and not target.explicit_devices:
        return (), ()
    endpoints = tuple(dict.fromkeys(g.endpoint for g in gpus if g.kind == "rpc" and g.endpoint))
    names = tuple(g.llama_name for g in gpus if g.llama_name)
    return (names if len(names) == len(gpus) else ()), endpoints


def with_split(spec: ModelSpec, target: Target, s: Settings, pins: Pins, g: GraphEstimate) -> Settings:
    """The -ts for several devices: the user's, or shares that fill each device alike. A device's
    share of the layers is what its budget leaves after what it holds whatever the split (its
    margin and compute buffer, and the output layer on the last one), so that no card fills up
    while another has room (llama.cpp's own default, free memory alone, ignores those)."""
    n = len(target.gpus)
    if n < 2 or s.n_gpu_layers <= 0:
        return s
    if pins.tensor_split is not None:
        return s.with_(tensor_split=tuple(pins.tensor_split))
    shares = tuple(float(max(gpu.memory_budget_bytes, 1)) for gpu in target.gpus)
    s = s.with_(tensor_split=_rounded(shares))
    if s.n_cpu_moe:
        return _split_by_cost(spec, target, s, g)
    per_layer = max(spec.layer_weight_bytes, default=1) + max(
        memory_breakdown(spec, s, target, g).kv.per_layer_bytes, default=0
    )
    for _ in range(2):
        mem = memory_breakdown(spec, s, target, g)
        room = []
        for d, (c, gpu) in enumerate(zip(mem.per_device, target.gpus, strict=True)):
            layers = sum(1 for x in mem.layer_devices if x == d)
            fixed = c.total_bytes - layers * per_layer
            room.append(max(gpu.memory_budget_bytes - fixed, 0) / max(per_layer, 1))
        if sum(room) <= 0:
            break
        s = s.with_(tensor_split=_rounded(tuple(room)))
    return s


def _split_by_cost(spec: ModelSpec, target: Target, s: Settings, g: GraphEstimate) -> Settings:
    """The -ts when the layers differ in size on the devices (the experts of the first n_cpu_moe
    layers are in RAM, so those layers weigh a fraction of the rest on their device): each
    device gets the run of layers whose bytes fill the same share of the room its budget leaves
    after what it holds whatever the split (margin, compute buffer). A split by layer count
    would give the device of the light leading layers too few of them, and leave it room."""
    for _ in range(2):
        mem = memory_breakdown(spec, s, target, g)
        kept = mem.host_override_bytes
        costs = [
            (il, spec.layer_weight_bytes[il] - kept[il] + mem.kv.per_layer_bytes[il])
            for il, d in enumerate(mem.layer_devices)
            if d >= 0
        ]
        if mem.output_device >= 0:
            out = spec.output_bytes + (spec.token_embd_bytes if spec.tied_embeddings else 0)
            costs.append((spec.n_layer, out))
        room = []
        for d, (c, gpu) in enumerate(zip(mem.per_device, target.gpus, strict=True)):
            mine = sum(
                b for il, b in costs if (mem.output_device if il == spec.n_layer else mem.layer_devices[il]) == d
            )
            room.append(max(gpu.memory_budget_bytes - (c.total_bytes - mine), 0))
        total_room, total_cost = sum(room), sum(b for _, b in costs)
        if total_room <= 0 or total_cost <= 0:
            return s
        # Where each device's run of layers ends: the (fractional) layer at which the bytes so far
        # reach that device's share of the room, scaled to the bytes there are.
        cum = list(itertools.accumulate((b for _, b in costs), initial=0))
        ends = []
        for want in itertools.accumulate(r / total_room * total_cost for r in room[:-1]):
            k = min(max(bisect.bisect_right(cum, want) - 1, 0), len(costs) - 1)
            ends.append(k + (want - cum[k]) / max(costs[k][1], 1))
        shares = [b - a for a, b in itertools.pairwise([0.0, *ends, float(len(costs))])]
        s = s.with_(tensor_split=_rounded(tuple(max(v, 0.0) for v in shares)))
    return s


def _rounded(shares: tuple[float, ...]) -> tuple[float, ...]:
    """Shares as a user reads and types them: per mille of the total, at least 1 each."""
    total = sum(shares) or 1.0
    return tuple(float(max(1, round(1000 * x / total))) for x in shares)
