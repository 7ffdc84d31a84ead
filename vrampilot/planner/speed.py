"""Speed model: decode is memory-bound, prefill compute-bound.

Decode: each token reads every active weight once plus the KV cache in use. Bytes on the GPU are
read at the card's effective bandwidth, bytes left on the host at system-memory bandwidth, so a few
CPU layers cost far more than their share: the partial-offload cliff. Prefill: matrix work at the
device's throughput; with partial offload llama.cpp streams host layers' weights to the GPU over
PCIe once per ubatch, which is why larger ubatches speed prompts up.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory import MemoryBreakdown
from vrampilot.planner.settings import Settings
from vrampilot.planner.target import Target

# Share of peak bandwidth llama.cpp's decode kernels reach on NVIDIA cards (typically 70-85%).
GPU_BANDWIDTH_EFFICIENCY = 0.75
# Share of the assumed host bandwidth reached by CPU decoding; bench/speed.py calibrates it
# against llama.cpp's measured speed on the embedded model (see README "Speed model").
HOST_BANDWIDTH_EFFICIENCY = 0.6
# Share of the CPU's nominal throughput (target.cpu_gflops, 60 GFLOP/s per core) reached by
# quantized matrix-vector products (decode) and matrix-matrix products (prefill). Calibrated with
# bench/speed.py on the embedded model (AMD EPYC, 1 thread, 2026-11-30): decode 74 tok/s measured
# (20 GFLOP/s per core), prefill 124 tok/s.
CPU_COMPUTE_EFFICIENCY = 0.33
CPU_PREFILL_EFFICIENCY = 0.7
# Effective host-to-device copy rate for streaming offloaded weights during prefill (PCIe 4 x16).
PCIE_GBPS = 20.0
# Fixed cost of a decode step on the GPU: the launch and synchronisation of every layer's kernels,
# which bytes/bandwidth does not see; it caps tiny models at a few thousand tokens/s.
GPU_TOKEN_OVERHEAD_S = 3e-4
GPU_LAYER_OVERHEAD_S = 2e-5
# Decode threads that saturate system memory bandwidth; fewer threads leave it unused.
THREADS_TO_SATURATE_MEMORY = 4


@dataclass(frozen=True)
class SpeedPrediction:
    decode_tps: float  # at the start of a conversation
    decode_tps_full_ctx: float  # with the context full
    prefill_tps: float
    device_bytes_per_token: int
    host_bytes_per_token: int

    def as_dict(self) -> dict[str, float]:
        return {
            "decode_tps": round(self.decode_tps, 1),
            "decode_tps_full_ctx": round(self.decode_tps_full_ctx, 1),
            "prefill_tps": round(self.prefill_tps, 1),
        }


def _output_read(spec: ModelSpec) -> tuple[int, int]:
    """(bytes, parameters) of the output matrix, which every token multiplies in full."""
    names = ("output.weight",) if not spec.tied_embeddings else ("token_embd.weight",)
    tensors = [t for t in spec.tensors if t.name in names or t.name == "output_norm.weight"]
    return sum(t.n_bytes for t in tensors), sum(t.n_elements for t in tensors)


def kv_read_bytes(mem: MemoryBreakdown, spec: ModelSpec, n_tokens: int, on_gpu: bool) -> float:
    """KV bytes one decode step reads on the GPU (or the host) with n_tokens in the context."""
    return _kv_read(mem, spec, n_tokens, lambda il: mem.gpu_layers[il] == on_gpu)


def _kv_read_on(mem: MemoryBreakdown, spec: ModelSpec, n_tokens: int, device: int) -> float:
    return _kv_read(mem, spec, n_tokens, lambda il: mem.layer_devices[il] == device)


def _kv_read(mem: MemoryBreakdown, spec: ModelSpec, n_tokens: int, layer_is_here: Callable[[int], bool]) -> float:
    """Each layer's cache is read up to the tokens it holds: all of them, or its sliding window."""
    total = 0.0
    for il, layer_bytes in enumerate(mem.kv.per_layer_bytes):
        cells = _cells(mem, spec, il)
        if layer_bytes and cells and layer_is_here(il):
            total += layer_bytes * min(n_tokens, cells) / cells
    return total


def _device_decode_seconds(spec: ModelSpec, target: Target, mem: MemoryBreakdown, n_tokens: int) -> float:
    """One token on the offload devices: each reads its layers' weights and KV at its own
    bandwidth, one after the other (a single sequence does not overlap them); where the token
    crosses to or from an RPC host it pays a round trip and the activations over the network."""
    out_bytes, _ = _output_read(spec)
    total = 0.0
    for d, gpu in enumerate(target.gpus[: len(mem.per_device)]):
        layers = mem.device_layers(d)
        read = sum(spec.layer_active_bytes[il] for il in layers) + _kv_read_on(mem, spec, n_tokens, d)
        if mem.output_device == d:
            read += out_bytes
        if not read:
            continue
        bw = gpu.bandwidth_gbps * 1e9 * GPU_BANDWIDTH_EFFICIENCY
        total += read / bw + GPU_TOKEN_OVERHEAD_S + GPU_LAYER_OVERHEAD_S * (len(layers) + (mem.output_device == d))
    # The token's path through the devices, in layer order: CPU (embedding), the devices, then
    # back for sampling. A hop that touches an RPC host costs a round trip plus the hidden state.
    path = [-1, *mem.layer_devices, mem.output_device, -1]
    hops = [(a, b) for a, b in itertools.pairwise(path) if a != b]
    for a, b in hops:
        rpc = [target.gpus[x] for x in (a, b) if x >= 0 and target.gpus[x].kind == "rpc"]
        if rpc:
            link = max(rpc, key=lambda g: g.rtt_ms)
            total += link.rtt_ms / 1000 + spec.n_embd * 4 / (max(link.network_gbps, 1e-3) * 1e9)
    return total


def _devices_prefill_seconds(spec: ModelSpec, target: Target, mem: MemoryBreakdown, ub: int, flops: float,
                             eff: float) -> float:  # fmt: skip
    """A ubatch through several devices: each does its layers' share of the work; pipelined
    (every layer offloaded), llama.cpp keeps them all busy on successive ubatches, so the slowest
    sets the pace, else they take turns. Hops to RPC hosts carry the ubatch's hidden states."""
    n = max(len(mem.layer_devices), 1)
    times = []
    for d, gpu in enumerate(target.gpus[: len(mem.per_device)]):
        share = len(mem.device_layers(d)) / n
        if share:
            times.append(share * flops / (gpu.fp16_tflops * 1e12 * eff))
    t = (max(times) if mem.pipelined else sum(times)) if times else 0.0
    for gpu in target.gpus:
        if gpu.kind == "rpc":
            t += gpu.rtt_ms / 1000 + 2 * ub * spec.n_embd * 4 / (max(gpu.network_gbps, 1e-3) * 1e9)
    return t


def network_share(spec: ModelSpec, target: Target, mem: MemoryBreakdown) -> float:
    """The share of a token's time spent crossing to and from RPC hosts (0 without hosts)."""
    if not any(g.kind == "rpc" for g in target.gpus):
        return 0.0
    with_net = _device_decode_seconds(spec, target, mem, 1)
    no_net = _device_decode_seconds(spec, _without_network(target), mem, 1)
    return (with_net - no_net) / with_net if with_net > 0 else 0.0


def _without_network(target: Target) -> Target:
    from dataclasses import replace

    return replace(target, gpus=tuple(replace(g, rtt_ms=0.0, network_gbps=1e6) for g in target.gpus))


def predict_speed(spec: ModelSpec, settings: Settings, target: Target, mem: MemoryBreakdown) -> SpeedPrediction:
    layer_bytes, layer_params = spec.layer_active_bytes, spec.layer_active_params
    out_bytes, out_params = _output_read(spec)
    gpu = target.has_gpu and settings.n_gpu_layers > 0
    on_gpu = [on and gpu for on in mem.gpu_layers]
    dev_w = sum(b for b, on in zip(layer_bytes, on_gpu, strict=True) if on)
    host_w = sum(b for b, on in zip(layer_bytes, on_gpu, strict=True) if not on)
    host_p = sum(p for p, on in zip(layer_params, on_gpu, strict=True) if not on)
    if gpu and mem.output_on_gpu:
        dev_w += out_bytes
    else:
        host_w += out_bytes
        host_p += out_params

    n_gpu = sum(on_gpu) + (1 if gpu and mem.output_on_gpu else 0)
    gpu_bw = target.device_bandwidth_gbps * 1e9 * GPU_BANDWIDTH_EFFICIENCY if gpu else 0.0
    cores = target.cpu_physical_cores
    thread_share = min(1.0, settings.n_threads / min(THREADS_TO_SATURATE_MEMORY, cores))
    host_bw = target.host_bandwidth_gbps * 1e9 * HOST_BANDWIDTH_EFFICIENCY * thread_share
    # Matrix-vector work on the CPU scales with the threads given to it, up to the physical cores.
    cpu_decode_flops = target.cpu_gflops * 1e9 * CPU_COMPUTE_EFFICIENCY * min(1.0, settings.n_threads / cores)

    def decode_seconds(n_tokens: int) -> tuple[float, int, int]:
        dev = dev_w + (kv_read_bytes(mem, spec, n_tokens, on_gpu=True) if gpu else 0.0)
        host = host_w + kv_read_bytes(mem, spec, n_tokens, on_gpu=False)
        if len(mem.per_device) > 1 or any(g.kind == "rpc" for g in target.gpus):
            t_dev = _device_decode_seconds(spec, target, mem, n_tokens) if gpu else 0.0
        else:
            t_dev = dev / gpu_bw + GPU_TOKEN_OVERHEAD_S + GPU_LAYER_OVERHEAD_S * n_gpu if dev and gpu_bw else 0.0
        # CPU decoding is bound by memory bandwidth or, on few cores, by arithmetic (2 FLOPs per
        # weight): whichever takes longer sets the pace.
        t_host = max(host / host_bw, 2.0 * host_p / cpu_decode_flops) if host else 0.0
        return t_dev + t_host, int(dev), int(host)

    t0, dev_bytes, host_bytes = decode_seconds(1)
    t_full, _, _ = decode_seconds(settings.n_ctx)

    # Prefill: 2 FLOPs per active weight per token, plus attention over half the context on average.
    n_head = max(spec.n_head or (0,))
    attn = 4.0 * spec.n_layer * (settings.n_ctx / 2) * n_head * spec.head_dim_k
    flops_per_token = 2.0 * (sum(layer_params) + out_params) + attn
    ub = settings.n_ubatch
    if gpu:
        eff = 0.45 * ub / (ub + 128)
        if len(mem.per_device) > 1:
            t_compute = _devices_prefill_seconds(spec, target, mem, ub, ub * flops_per_token, eff)
        else:
            t_compute = ub * flops_per_token / (target.device_tflops * 1e12 * eff)
        # Host layers' weights travel to the GPU once per ubatch (op offload).
        t_copy = host_w / (PCIE_GBPS * 1e9)
        prefill = ub / (t_compute + t_copy)
    else:
        threads = min(1.0, settings.n_threads_batch / cores)
        prefill = target.cpu_gflops * 1e9 * CPU_PREFILL_EFFICIENCY * threads / flops_per_token
    return SpeedPrediction(
        decode_tps=1.0 / t0 if t0 > 0 else 0.0,
        decode_tps_full_ctx=1.0 / t_full if t_full > 0 else 0.0,
        prefill_tps=prefill,
        device_bytes_per_token=dev_bytes,
        host_bytes_per_token=host_bytes,
    )


def _cells(mem: MemoryBreakdown, spec: ModelSpec, il: int) -> int:
    kv = mem.kv
    return kv.n_cells_swa if (spec.swa_layers[il] and kv.n_cells_swa) else kv.n_cells
