"""The one memory model: bytes per component (weights, KV, compute, output, margin) per device.

Weights come from the tensor table; KV and compute from kv.py and compute.py, which are checked
against llama.cpp's own allocations in tests. Layer placement follows llama-model.cpp
(load_tensors): with -ngl N, layer il is offloaded when il >= n_layer + 1 - N, where il == n_layer
is the output layer. So the output layer is the first to move and layer 0 the last; the token
embedding always stays on the host. With several devices (GPUs, RPC hosts) the offloaded layers
are cut by the split (-ts, by default each device's free memory) in order, and each device holds
its layers' weights and KV cache and a compute buffer of its own; tests hold this against
llama.cpp's per-device buffers with two RPC hosts on loopback. Tensors a CPU override matches
(a MoE layer's routed experts under --n-cpu-moe, the user's -ot patterns; planner/memory/placement.py)
stay in host memory while the rest of their layer and its KV cache go to the layer's device.
A vision projector (Settings.mmproj_path) is one more component, on the device planner/memory/projector.py
says clip.cpp puts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory.compute import FORMULA, GraphEstimate, compute_buffer_bytes
from vrampilot.planner.memory.kv import KvBreakdown, drafts_with_mtp
from vrampilot.planner.memory.placement import (
    cpu_override_patterns,
    host_layer_bytes,
    offloaded_layer_device,
    split_points,
)
from vrampilot.planner.memory.projector import ProjectorLoad, projector_load
from vrampilot.planner.memory.server_host import ServerHost
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target


@dataclass(frozen=True)
class Components:
    weights_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0
    output_bytes: int = 0
    margin_bytes: int = 0
    # The vision projector's weights and compute buffer (planner/memory/projector.py), where clip.cpp puts them.
    projector_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.kv_bytes
            + self.compute_bytes
            + self.output_bytes
            + self.margin_bytes
            + self.projector_bytes
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "weights": self.weights_bytes,
            "kv": self.kv_bytes,
            "compute": self.compute_bytes,
            "output": self.output_bytes,
            "margin": self.margin_bytes,
            "projector": self.projector_bytes,
            "total": self.total_bytes,
        }


@dataclass(frozen=True)
class MemoryBreakdown:
    device: Components  # summed over the offload devices
    host: Components
    kv: KvBreakdown
    gpu_layers: tuple[bool, ...]  # per repeating layer: True when on an offload device
    output_on_gpu: bool
    # Per offload device, in the target's order (its `gpus`): what llama.cpp puts there.
    per_device: tuple[Components, ...] = ()
    layer_devices: tuple[int, ...] = ()  # per repeating layer: the device's position, -1 on the CPU
    output_device: int = -1
    pipelined: bool = False  # llama.cpp pipelines the ubatch across the devices (see compute.py)
    # Per repeating layer: bytes of its weights in host memory although the layer is offloaded
    # (CPU overrides: experts under --n-cpu-moe, -ot patterns); all zero without overrides.
    host_override_bytes: tuple[int, ...] = ()
    projector: ProjectorLoad | None = None  # the vision projector, when the plan loads one
    # What llama-server adds in host RAM (prompt cache, checkpoints, the process), sized by the
    # plan to what the host budget leaves (planner/memory/server_host.py); None before the plan sizes it.
    server: ServerHost | None = None

    @property
    def total_bytes(self) -> int:
        return self.device.total_bytes + self.host.total_bytes

    @property
    def served_host_bytes(self) -> int:
        """The host's part when llama-server runs the plan: the engine's, and the server's own."""
        return self.host.total_bytes + (self.server.total_bytes if self.server else 0)

    def device_layers(self, position: int) -> tuple[int, ...]:
        """The repeating layers on device `position`."""
        return tuple(il for il, d in enumerate(self.layer_devices) if d == position)


def layer_devices(spec: ModelSpec, n_gpu_layers: int, shares: Sequence[float]) -> tuple[tuple[int, ...], int]:
    """Where llama.cpp puts each repeating layer and the output layer for -ngl N across devices
    with these split shares (llama-model.cpp, load_tensors): the last N of the n_layer + 1 layers
    (the output layer counts last) are offloaded, and offloaded layer il goes to the first device
    whose split point exceeds (il - first offloaded) / N. -1: the CPU."""
    n_dev = len(shares)
    n_all = spec.n_layer
    ngl = max(0, min(n_gpu_layers, n_all + 1)) if n_dev else 0
    start = max(n_all + 1 - ngl, 0)
    points = split_points(shares) if n_dev else []

    def where(il: int) -> int:
        if ngl == 0 or il < start or il - start >= ngl:
            return -1
        return offloaded_layer_device(il - start, ngl, points)

    return tuple(where(il) for il in range(n_all)), where(n_all)


def layer_placement(spec: ModelSpec, n_gpu_layers: int) -> tuple[tuple[bool, ...], bool]:
    """Which repeating layers and whether the output layer land on the GPU for -ngl N."""
    layers, output = layer_devices(spec, n_gpu_layers, (1.0,))
    return tuple(d >= 0 for d in layers), output >= 0


def loaded_layer_bytes(spec: ModelSpec, settings: Settings) -> tuple[int, ...]:
    """Per repeating layer, the weight bytes llama.cpp loads: a multi-token-prediction block
    (the last `nextn_predict_layers` blocks) is created with TENSOR_SKIP unless the model is
    loaded to draft with it (llama_model_params.load_mtp), in every architecture the vendored
    llama.cpp gives one (src/models/*.cpp), so its weights take no memory in a plain plan."""
    if not spec.n_layer_nextn or drafts_with_mtp(spec, settings):
        return spec.layer_weight_bytes
    first_mtp = spec.n_layer - spec.n_layer_nextn
    return tuple(b if il < first_mtp else 0 for il, b in enumerate(spec.layer_weight_bytes))


def memory_breakdown(
    spec: ModelSpec, settings: Settings, target: Target, graph: GraphEstimate = FORMULA
) -> MemoryBreakdown:
    n_dev = len(target.gpus) if target.has_gpu and settings.n_gpu_layers > 0 else 0
    kv = graph.kv_breakdown(spec, settings)
    output = graph.output_bytes(spec, settings)
    layer_bytes = loaded_layer_bytes(spec, settings)
    proj = projector_load(settings, target)
    if n_dev == 0:
        host = Components(
            weights_bytes=spec.weight_bytes - sum(spec.layer_weight_bytes) + sum(layer_bytes),
            kv_bytes=kv.total_bytes,
            compute_bytes=compute_buffer_bytes(spec, settings, device="cpu", graph=graph),
            output_bytes=output,
            projector_bytes=proj.host_bytes if proj else 0,
        )
        return MemoryBreakdown(
            Components(), host, kv, (False,) * spec.n_layer, False, layer_devices=(-1,) * spec.n_layer, projector=proj
        )
    shares = device_shares(target, settings)
    where, out_dev = layer_devices(spec, settings.n_gpu_layers, shares)
    kept = host_layer_bytes(spec, settings)
    moved = tuple(kept[il] if where[il] >= 0 and layer_bytes[il] else 0 for il in range(spec.n_layer))
    # llama.cpp pipelines ubatches across several devices when every layer is offloaded, no tensor
    # override is given and each device supports async compute and events (llama-context.cpp,
    # llama_context(): `!model.has_tensor_overrides()`; its split mode is layer and offload_kqv on,
    # as every plan's). RPC and CUDA devices are async; experts kept in RAM (--n-cpu-moe, -ot) turn
    # pipelining off, and with it the scheduler's input copies.
    pipelined = (
        n_dev > 1
        and settings.n_gpu_layers > spec.n_layer
        and not cpu_override_patterns(settings)
        and all(g.asynchronous for g in target.gpus)
    )
    per_device = []
    for d in range(n_dev):
        mine = [il for il, x in enumerate(where) if x == d]
        weights = sum(layer_bytes[il] - moved[il] for il in mine)
        if out_dev == d:
            weights += spec.output_bytes
            if spec.tied_embeddings:
                # llama.cpp loads a second copy of token_embd as the output matrix (TENSOR_DUPLICATED).
                weights += spec.token_embd_bytes
        holds = bool(mine) or out_dev == d
        compute = (
            compute_buffer_bytes(
                spec, settings, device="gpu", graph=graph, pipelined=pipelined, label=device_label(target, d)
            )
            if holds
            else 0
        )
        per_device.append(
            Components(
                weights_bytes=weights,
                # KV of an offloaded layer lives with the layer (offload_kqv is on by default).
                kv_bytes=sum(kv.per_layer_bytes[il] for il in mine),
                compute_bytes=compute,
                margin_bytes=target.gpus[d].margin_bytes(target.device_margin_bytes),
                projector_bytes=proj.device_bytes if proj and proj.device == d else 0,
            )
        )
    host_layers = [il for il, x in enumerate(where) if x < 0]
    host_weights = (
        spec.token_embd_bytes + spec.other_weight_bytes + sum(layer_bytes[il] for il in host_layers) + sum(moved)
    )
    if out_dev < 0:
        host_weights += spec.output_bytes
    host = Components(
        weights_bytes=host_weights,
        kv_bytes=sum(kv.per_layer_bytes[il] for il in host_layers),
        compute_bytes=compute_buffer_bytes(spec, settings, device="host", graph=graph, pipelined=pipelined),
        output_bytes=output,
        projector_bytes=proj.host_bytes if proj else 0,
    )
    return MemoryBreakdown(
        device=_sum(per_device),
        host=host,
        kv=kv,
        gpu_layers=tuple(x >= 0 for x in where),
        output_on_gpu=out_dev >= 0,
        per_device=tuple(per_device),
        layer_devices=where,
        output_device=out_dev,
        pipelined=pipelined,
        host_override_bytes=moved,
        projector=proj,
    )


def device_shares(target: Target, settings: Settings) -> tuple[float, ...]:
    """The split across the target's offload devices: the plan's -ts, else llama.cpp's default
    (each device's free memory: its budget here)."""
    n = len(target.gpus)
    if settings.tensor_split and len(settings.tensor_split) == n and sum(settings.tensor_split) > 0:
        return tuple(settings.tensor_split)
    return tuple(float(max(g.memory_budget_bytes, 1)) for g in target.gpus)


def device_label(target: Target, position: int) -> str:
    """The name llama.cpp gives the device's compute buffer (matches a dry run's measurement)."""
    g = target.gpus[position]
    return g.buffer_name or g.name


def _sum(parts: Sequence[Components]) -> Components:
    return Components(
        weights_bytes=sum(p.weights_bytes for p in parts),
        kv_bytes=sum(p.kv_bytes for p in parts),
        compute_bytes=sum(p.compute_bytes for p in parts),
        output_bytes=sum(p.output_bytes for p in parts),
        margin_bytes=sum(p.margin_bytes for p in parts),
        projector_bytes=sum(p.projector_bytes for p in parts),
    )
