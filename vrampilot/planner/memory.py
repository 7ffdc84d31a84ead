"""The one memory model: bytes per component (weights, KV, compute, output, margin) per device.

Weights come from the tensor table; KV and compute from kv.py and compute.py, which are checked
against llama.cpp's own allocations in tests. Layer placement follows llama-model.cpp
(load_tensors): with -ngl N, layer il sits on the GPU when il >= n_layer + 1 - N, where il == n_layer
is the output layer. So the output layer is the first to move and layer 0 the last; the token
embedding always stays on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.gguf import ModelSpec
from vrampilot.planner.compute import FORMULA, GraphEstimate, compute_buffer_bytes, output_buffer_bytes
from vrampilot.planner.kv import KvBreakdown, kv_cache_bytes
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target


@dataclass(frozen=True)
class Components:
    weights_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0
    output_bytes: int = 0
    margin_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.output_bytes + self.margin_bytes

    def as_dict(self) -> dict[str, int]:
        return {
            "weights": self.weights_bytes,
            "kv": self.kv_bytes,
            "compute": self.compute_bytes,
            "output": self.output_bytes,
            "margin": self.margin_bytes,
            "total": self.total_bytes,
        }


@dataclass(frozen=True)
class MemoryBreakdown:
    device: Components  # summed over GPUs
    host: Components
    kv: KvBreakdown
    gpu_layers: tuple[bool, ...]  # per repeating layer: True when on the GPU
    output_on_gpu: bool

    @property
    def total_bytes(self) -> int:
        return self.device.total_bytes + self.host.total_bytes


def layer_placement(spec: ModelSpec, n_gpu_layers: int) -> tuple[tuple[bool, ...], bool]:
    """Which repeating layers and whether the output layer land on the GPU for -ngl N."""
    ngl = max(0, min(n_gpu_layers, spec.n_layer + 1))
    start = spec.n_layer + 1 - ngl
    return tuple(il >= start for il in range(spec.n_layer)), ngl >= 1


def weights_split(spec: ModelSpec, n_gpu_layers: int, has_gpu: bool) -> tuple[int, int]:
    """(device bytes, host bytes) of the weights."""
    if not has_gpu:
        return 0, spec.weight_bytes
    layers, output_on_gpu = layer_placement(spec, n_gpu_layers)
    device = sum(b for b, on in zip(spec.layer_weight_bytes, layers, strict=True) if on)
    host = spec.token_embd_bytes + spec.other_weight_bytes
    host += sum(b for b, on in zip(spec.layer_weight_bytes, layers, strict=True) if not on)
    if output_on_gpu:
        device += spec.output_bytes
        if spec.tied_embeddings:
            # llama.cpp loads a second copy of token_embd as the output matrix (TENSOR_DUPLICATED).
            device += spec.token_embd_bytes
    else:
        host += spec.output_bytes
    return device, host


def memory_breakdown(
    spec: ModelSpec, settings: Settings, target: Target, graph: GraphEstimate = FORMULA
) -> MemoryBreakdown:
    has_gpu = target.has_gpu and settings.n_gpu_layers > 0
    kv = kv_cache_bytes(spec, settings)
    layers, output_on_gpu = layer_placement(spec, settings.n_gpu_layers if has_gpu else 0)
    w_dev, w_host = weights_split(spec, settings.n_gpu_layers, has_gpu)
    # KV of an offloaded layer lives with the layer (offload_kqv is on by default).
    kv_dev = sum(b for b, on in zip(kv.per_layer_bytes, layers, strict=True) if on)
    kv_host = kv.total_bytes - kv_dev
    output = output_buffer_bytes(spec, settings)
    if has_gpu:
        device = Components(
            weights_bytes=w_dev,
            kv_bytes=kv_dev,
            compute_bytes=compute_buffer_bytes(spec, settings, device="gpu", graph=graph),
            margin_bytes=target.device_margin_bytes * len(target.gpus),
        )
        host = Components(
            weights_bytes=w_host,
            kv_bytes=kv_host,
            compute_bytes=compute_buffer_bytes(spec, settings, device="host", graph=graph),
            output_bytes=output,
        )
    else:
        device = Components()
        host = Components(
            weights_bytes=w_host,
            kv_bytes=kv.total_bytes,
            compute_bytes=compute_buffer_bytes(spec, settings, device="cpu", graph=graph),
            output_bytes=output,
        )
    return MemoryBreakdown(device=device, host=host, kv=kv, gpu_layers=layers, output_on_gpu=output_on_gpu and has_gpu)
