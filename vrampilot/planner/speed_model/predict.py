"""Speed model: decode is memory-bound, prefill compute-bound; both corrected by what replies measured.

Decode: each token reads every active weight once plus the KV cache in use. Bytes on the GPU are
read at the card's effective bandwidth, layers left on the host run at the rates llama.cpp's CPU
kernels reach on this machine (planner/speed_model/cpu_speed.py, from the speed probe; assumed rates without
one), so a few CPU layers cost far more than their share: the partial-offload cliff. Prefill:
matrix work at the device's throughput; with partial offload llama.cpp streams host layers'
weights to the GPU over PCIe once per ubatch, which is why larger ubatches speed prompts up.

`SpeedModel` answers for any conditions (a prompt of n tokens after n_past, a token generated with
n tokens in the cache), which is how a reply's measured speed is compared with the prediction for
that very reply (planner/calibration.py). `predict_speed` gives the plan's headline figures,
multiplied by the factors replies taught on this machine and backend.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory.breakdown import MemoryBreakdown
from vrampilot.planner.memory.kv import DSV4_CSA_RATIO, DSV4_HCA_RATIO
from vrampilot.planner.memory.placement import host_layer_active_bytes
from vrampilot.planner.settings import Settings
from vrampilot.planner.speed_model.cpu_speed import (
    AttentionShape,
    CpuRates,
    attention_shapes,
    decode_seconds,
    prefill_seconds,
    weight_table,
)
from vrampilot.planner.speed_model.graph_factors import factors_for_model
from vrampilot.planner.target import GpuTarget, Target

# What a GPU decode step is assumed to cost where no device probe measured the card, fitted on
# published llama-bench results of real cards (bench/published_speed.py), not on any one card:
# GDDR cards reach this share of their peak bandwidth, plus a fixed cost per token and per layer
# (least squares over models of several sizes, which set the fixed part apart). HBM cards reach
# a smaller share of it (MEMORY_KIND_SHARE). Float weights (F16, BF16, F32) are read nearer the
# peak than quantized ones, whose mat-vec kernels unpack every block. Unknown memory kinds take
# GDDR's. Method, the cards and error ranges: docs/speed-model.md, "GPU speed against published
# results", and its decision log entry "GPU speed against published llama-bench results".
GPU_BANDWIDTH_EFFICIENCY = 0.84
MEMORY_KIND_SHARE = {"hbm": 0.57}
FLOAT_DECODE_SHARE = 1.17
# Effective host-to-device copy rate for streaming offloaded weights during prefill (PCIe 4 x16).
PCIE_GBPS = 20.0
# Fixed cost of a decode step on the GPU: the launch and synchronisation of its kernels, which
# bytes/bandwidth does not see (fitted with the share above); it caps tiny models.
GPU_TOKEN_OVERHEAD_S = 3e-4
GPU_LAYER_OVERHEAD_S = 2e-6
# The prompt the headline "reading prompts" figure is for: 512 tokens at the start of a chat.
HEADLINE_PROMPT_TOKENS = 512
# A layer on the GPU whose routed experts are in RAM hands its hidden state to the CPU and back
# for each token: two small copies and a synchronisation (assumed, not measured on a GPU).
HOST_EXPERTS_HOP_S = 3e-5
# Kernels a decoder layer's graph runs (7 products, norms, rope, cache writes, attention, the
# residual adds, the gated activation), each paying the device probe's per-product cost.
DEVICE_KERNELS_PER_LAYER = 16
# A prompt's ubatch is at least its kernels' fixed costs (a launch and its tail each; no CUDA
# graph for batches) and at least one read of its weights: without this floor a tiny model's
# prompt is priced at its FLOPs over the card's peak, far beyond any launch rate. Assumed, and set
# before the prompt shares below were fitted (docs/speed-model.md, decision log, "GPU speed against published llama-bench results").
GPU_PROMPT_KERNEL_S = 8e-6
# The share of its FP16 peak a generation's prompts reach under today's llama.cpp, as a multiple
# of _ubatch_efficiency's curve, fitted on published runs (bench/published_speed.py; one
# multiplier per generation, not per card). Generations no fitted card has take 1 (the curve).
# Method and error ranges: docs/speed-model.md, decision log, "GPU speed against published llama-bench results".
PROMPT_SHARE_BY_GENERATION = {"ampere": 2.01, "ada": 1.42}
# Quantized weights' products dequantize as they go, so their prompts run slower than F16 ones of
# the same model (fitted on the cards with both: docs/speed-model.md, decision log, "GPU speed against published llama-bench results").
QUANTIZED_PROMPT_SHARE = 0.87


_FLOAT_TYPES = frozenset({"f16", "bf16", "f32"})


def device_decode_bps(gpu: GpuTarget) -> float:
    """Weight bytes per second a decode step reads on `gpu`: measured by the device probe, else
    its peak times the share llama.cpp is assumed to reach."""
    if gpu.measured is not None:
        return gpu.measured.decode_gbps * 1e9
    return gpu.bandwidth_gbps * 1e9 * assumed_bandwidth_share(gpu)


def assumed_bandwidth_share(gpu: GpuTarget) -> float:
    """The share of `gpu`'s peak bandwidth a decode step is assumed to reach: GDDR's, times its
    memory kind's relative share."""
    return GPU_BANDWIDTH_EFFICIENCY * MEMORY_KIND_SHARE.get(gpu.memory_kind, 1.0)


def device_layer_overhead_s(gpu: GpuTarget) -> float:
    """A layer's fixed cost per decode step on `gpu` beyond its bytes."""
    if gpu.measured is not None:
        return gpu.measured.product_overhead_us * 1e-6 * DEVICE_KERNELS_PER_LAYER
    return GPU_LAYER_OVERHEAD_S


def _ubatch_efficiency(m: int) -> float:
    """The share of a device's peak a ubatch of m tokens reaches."""
    return 0.45 * m / (m + 128)


def device_flops(gpu: GpuTarget, m: int) -> float:
    """FLOPs per second of a ubatch of m tokens on `gpu`: the device probe's 512-token product
    scaled by the assumed shape of the curve, else the peak times that curve."""
    if gpu.measured is not None:
        return gpu.measured.prefill_gflops * 1e9 * _ubatch_efficiency(m) / _ubatch_efficiency(512)
    return gpu.fp16_tflops * 1e12 * _ubatch_efficiency(m) * PROMPT_SHARE_BY_GENERATION.get(gpu.generation, 1.0)


@dataclass(frozen=True)
class SpeedPrediction:
    decode_tps: float  # at the start of a conversation
    decode_tps_full_ctx: float  # with the context full
    prefill_tps: float  # reading a HEADLINE_PROMPT_TOKENS prompt at the start of a conversation
    prefill_tps_full_ctx: float  # reading a prompt that fills the context (a long document)
    device_bytes_per_token: int
    host_bytes_per_token: int
    # What corrected these figures: measured / predicted over recent replies on this backend.
    decode_factor: float = 1.0
    prefill_factor: float = 1.0
    calibration_replies: int = 0
    calibration_model: str = ""  # the model whose own replies made the factors ("": every model's)

    def as_dict(self) -> dict[str, float]:
        return {
            "decode_tps": round(self.decode_tps, 1),
            "decode_tps_full_ctx": round(self.decode_tps_full_ctx, 1),
            "prefill_tps": round(self.prefill_tps, 1),
            "prefill_tps_full_ctx": round(self.prefill_tps_full_ctx, 1),
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
    """Each layer's cache is read up to the tokens it holds: all of them, or its sliding window
    (DeepSeek-V4: what its compressed attention reads, `_dsv4_read`)."""
    total = 0.0
    for il, layer_bytes in enumerate(mem.kv.per_layer_bytes):
        if not layer_bytes or not layer_is_here(il):
            continue
        if spec.compress_ratios:
            total += _dsv4_read(mem, spec, il, n_tokens)
            continue
        cells = _cells(mem, spec, il)
        if cells:
            total += layer_bytes * min(n_tokens, cells) / cells
    return total


# Which DeepSeek-V4 layers hold each cache part (None: every layer).
_DSV4_PART_RATIO = {"window": None, "csa": DSV4_CSA_RATIO, "indexer": DSV4_CSA_RATIO, "hca": DSV4_HCA_RATIO}


def _dsv4_read(mem: MemoryBreakdown, spec: ModelSpec, il: int, n_tokens: int) -> float:
    """Cache bytes DeepSeek-V4's layer il reads for one decoded token with n_tokens in the
    context (llama-kv-cache-dsv4.cpp's caches, the deepseek4 graph): the raw window's last
    sliding_window entries; a CSA layer's top-k compressed entries and every lightning-indexer key
    (the indexer scores them all to choose the top-k); an HCA layer's every compressed entry; and
    the layer's compressor states, read and rewritten each token. MTP blocks do not run."""
    if il >= spec.n_layer - spec.n_layer_nextn:
        return 0.0
    n = max(n_tokens, 1)
    ratio = spec.compress_ratios[il]
    reads = {
        "window": min(n, spec.sliding_window),
        "csa": min(n // DSV4_CSA_RATIO, spec.indexer_top_k),
        "indexer": n // DSV4_CSA_RATIO,
        "hca": n // DSV4_HCA_RATIO,
    }
    total = caches = 0.0
    for part in mem.kv.parts:
        if part.name not in reads:
            continue  # a compressor state, counted below
        want = _DSV4_PART_RATIO[part.name]
        if want is not None and ratio != want:
            continue
        per_cell = part.bytes / max(part.layers * part.cells * part.streams, 1)  # one layer, one cell
        caches += per_cell * part.cells * part.streams
        total += per_cell * min(reads[part.name], part.cells)
    return total + max(0.0, mem.kv.per_layer_bytes[il] - caches)


def indexer_flops(spec: ModelSpec, on_layer: Callable[[int], bool], n_tokens: int) -> float:
    """FLOPs of DeepSeek-V4's lightning indexer for one decoded token on the layers `on_layer`
    picks: each CSA layer's heads score every compressed key (a product of the key length)."""
    if not spec.compress_ratios or not spec.indexer_n_head:
        return 0.0
    n_main = spec.n_layer - spec.n_layer_nextn
    csa = sum(1 for il in range(n_main) if spec.compress_ratios[il] == DSV4_CSA_RATIO and on_layer(il))
    return 2.0 * csa * spec.indexer_n_head * spec.indexer_head_size * (max(n_tokens, 1) // DSV4_CSA_RATIO)


def backend_key(target: Target, settings: Settings) -> str:
    """Which learned factors a plan uses: the offload devices' when layers run there (all of them,
    RPC hosts by endpoint: another card or host is another speed), else the CPU code's at the plan's
    thread counts. What replies at one thread count taught did not carry to another
    (docs/speed-model.md, decision log, "How far replies move a prediction"); the probe's own
    figures, the graph factors included, are per thread count already."""
    if target.has_gpu and settings.n_gpu_layers > 0:
        return "gpu:" + "+".join(g.label for g in target.gpus)
    t, tb = settings.n_threads, settings.n_threads_batch
    threads = f"{t} thread{'s' if t != 1 else ''}" + (f" ({tb} for prompts)" if tb != t else "")
    return f"cpu:{target.cpu_variant or 'cpu'}, {threads}"


def calibration_model(spec: ModelSpec, settings: Settings, target: Target) -> str:
    """The name a model's own learned factors and last reply are kept under: the file's, and, for a
    plan that splits it between offload devices and the CPU (layers, experts or -ot tensors in
    RAM), its placement too. Such a plan's speed is paced by the part the CPU does, which another
    placement changes: a factor learned at -ngl 20 said nothing of the same file at full offload,
    yet both shared one window (issue 57, noticed in the MoE round). A plan wholly on the GPU or
    wholly on the CPU keeps the plain name (so the factors stored before stay where they were)."""
    name = spec.path.name
    if not (target.has_gpu and settings.n_gpu_layers > 0):
        return name
    parts = [] if settings.n_gpu_layers > spec.n_layer else [f"-ngl {settings.n_gpu_layers}"]
    if settings.n_cpu_moe and spec.layer_expert_bytes:
        parts.append(f"--n-cpu-moe {min(settings.n_cpu_moe, spec.n_layer)}")
    if settings.cpu_tensor_patterns:
        parts.append("-ot " + ",".join(settings.cpu_tensor_patterns))
    return f"{name} ({', '.join(parts)})" if parts else name


def _attention_shapes(spec: ModelSpec, mem: MemoryBreakdown) -> tuple[AttentionShape | None, ...]:
    return attention_shapes(spec, lambda il: _cells(mem, spec, il))


class SpeedModel:
    """Seconds per token of one plan's settings on its target, before calibration."""

    def __init__(self, spec: ModelSpec, settings: Settings, target: Target, mem: MemoryBreakdown) -> None:
        self.spec, self.settings, self.target, self.mem = spec, settings, target, mem
        self.gpu = target.has_gpu and settings.n_gpu_layers > 0
        self.on_gpu = tuple(on and self.gpu for on in mem.gpu_layers)
        self.output_on_gpu = self.gpu and mem.output_on_gpu
        self.table = weight_table(spec)
        probe, cores = target.host_probe, target.cpu_physical_cores
        self.rates = CpuRates(probe, cores, target.host_bandwidth_gbps, graph=factors_for_model(spec, probe, cores))
        self.attention = _attention_shapes(spec, mem)
        # Without flash attention the products run as f16 matrix products over the cache; the
        # probe's f16 attention rates are the nearest measurement.
        self.kv_type = settings.type_k if settings.flash_attn else "f16"
        layer_bytes, layer_params = spec.layer_active_bytes, spec.layer_active_params
        out_bytes, out_params = _output_read(spec)
        # Per layer: what a decoded token reads in RAM although the layer is on the GPU (experts
        # --n-cpu-moe keeps there, tensors the user's -ot patterns keep there), and whether the
        # layer hands its hidden state to the CPU and back for it.
        held = (
            host_layer_active_bytes(spec, settings)
            if settings.n_cpu_moe or settings.cpu_tensor_patterns
            else (0.0,) * spec.n_layer
        )
        self.moved_active = tuple(held[il] if on else 0.0 for il, on in enumerate(self.on_gpu))
        self.experts_on_host = tuple(x > 0 for x in self.moved_active)
        self.dev_w = sum(b - x for b, x, on in zip(layer_bytes, self.moved_active, self.on_gpu, strict=True) if on)
        self.host_w = sum(b for b, on in zip(layer_bytes, self.on_gpu, strict=True) if not on) + sum(self.moved_active)
        if self.output_on_gpu:
            self.dev_w += out_bytes
        else:
            self.host_w += out_bytes
        self.n_gpu = sum(self.on_gpu) + (1 if self.output_on_gpu else 0)
        self.flops_per_token = 2.0 * (sum(layer_params) + out_params)
        # The device's matrices by kind: float weights decode nearer the peak, quantized ones'
        # prompt products run below it (FLOAT_DECODE_SHARE, QUANTIZED_PROMPT_SHARE).
        on_dev = [
            mat
            for layer, on, moved in zip(self.table.layers, self.on_gpu, self.experts_on_host, strict=True)
            if on and not moved
            for mat in layer.matrices
        ]
        if self.output_on_gpu and self.table.output is not None:
            on_dev.append(self.table.output)
        self.dev_float_bytes = sum(m.bytes_active for m in on_dev if m.type_name in _FLOAT_TYPES)
        quantized = sum(m.params_active for m in on_dev if m.type_name not in _FLOAT_TYPES)
        self.dev_weight_bytes = sum(m.bytes_total for m in on_dev)
        # FLOPs per token as the device's kernels pay them: quantized products at their share.
        self.gpu_flops_per_token = self.flops_per_token + 2.0 * quantized * (1.0 / QUANTIZED_PROMPT_SHARE - 1.0)
        self.gpu_bw = 0.0
        self.layer_overhead_s = GPU_LAYER_OVERHEAD_S
        if self.gpu:
            self.gpu_bw = target.paced_rate(device_decode_bps)
            self.layer_overhead_s = max(device_layer_overhead_s(g) for g in target.gpus)

    @property
    def host_layers(self) -> tuple[bool, ...]:
        return tuple(not on for on in self.on_gpu)

    def bytes_per_token(self, n_tokens: int) -> tuple[float, float]:
        """(device, host) bytes one decode step reads with n_tokens in the cache."""
        dev = self.dev_w + (kv_read_bytes(self.mem, self.spec, n_tokens, on_gpu=True) if self.gpu else 0.0)
        host = self.host_w + kv_read_bytes(self.mem, self.spec, n_tokens, on_gpu=False)
        return dev, host

    def decode_seconds(self, n_tokens: int) -> float:
        """One generated token with n_tokens already in the cache."""
        dev, _ = self.bytes_per_token(n_tokens)
        t_dev = 0.0
        if self.gpu and (len(self.mem.per_device) > 1 or any(g.kind == "rpc" for g in self.target.gpus)):
            # Each device at its own bandwidth, plus the hops to and from RPC hosts.
            t_dev = _device_decode_seconds(self.spec, self.target, self.mem, n_tokens, self.moved_active)
        elif dev and self.gpu_bw:
            fast = self.dev_float_bytes * (1.0 - 1.0 / FLOAT_DECODE_SHARE) if self._assumed_rates else 0.0
            t_dev = (dev - fast) / self.gpu_bw + GPU_TOKEN_OVERHEAD_S + self.layer_overhead_s * self.n_gpu
            flops = indexer_flops(self.spec, lambda il: self.on_gpu[il], n_tokens)
            if flops:
                # The indexer's heads make its scores a small matrix product, not a pure read.
                t_dev += flops / sum(device_flops(g, self.spec.indexer_n_head) for g in self.target.gpus)
        # Each layer whose experts are in RAM hands its hidden state to the CPU and back.
        t_dev += sum(self.experts_on_host) * HOST_EXPERTS_HOP_S
        t_host = decode_seconds(
            self.table,
            self.host_layers,
            not self.output_on_gpu,
            self.attention,
            n_tokens,
            self.kv_type,
            self.settings.n_threads,
            self.rates,
            self.experts_on_host,
        )
        return t_dev + t_host

    def prefill_seconds(self, n_tokens: int, n_past: int = 0) -> float:
        """Reading n_tokens of prompt with n_past tokens already in the cache."""
        s = self.settings
        if n_tokens <= 0:
            return 0.0
        if not self.gpu:
            return prefill_seconds(
                self.table,
                self.host_layers,
                True,
                self.attention,
                n_tokens,
                n_past,
                s.n_batch,
                s.n_ubatch,
                self.kv_type,
                s.n_threads_batch,
                self.rates,
            )
        # GPU: matrix work at the card's throughput, plus attention over the cache and the ubatch,
        # plus the host layers' weights copied over PCIe once per ubatch (op offload). A ubatch's
        # time is affine in its work, so the full ubatches are priced at their mean work, times
        # their count (no loop over ubatches: a 16M context has 32K of them).
        ub = max(1, min(s.n_ubatch, s.n_batch))
        full, rest = divmod(n_tokens, ub)
        t = 0.0
        for count, m, start in ((full, ub, n_past), (1 if rest else 0, rest, n_past + full * ub)):
            if count:
                q = count * m  # the queries of these ubatches; on average each sees start + q/2 cells
                work = q * self.gpu_flops_per_token + self._gpu_attention_flops(q, start + q / 2)
                t += count * self._gpu_ubatch_seconds(m, work / count)
        return t

    def _gpu_attention_flops(self, q: int, mean_cells: float) -> float:
        """Attention FLOPs of q prompt queries that see `mean_cells` cells on average. DeepSeek-V4's
        compressed layers attend to their raw window and the compressed entries a query keeps (CUDA's
        flash attention gathers the top-k's unmasked cells, fattn.cu), and a CSA layer's indexer
        scores every compressed key; every other model attends to every cell."""
        spec = self.spec
        if not spec.compress_ratios:
            return 4.0 * spec.n_layer * max(spec.n_head or (0,)) * spec.head_dim_k * q * mean_cells
        n = int(mean_cells)
        total = 0.0
        for att in self.attention:
            if att is not None:
                cells = att.attended_cells(n) if att.compress_ratio else min(n, att.cells)
                total += 4.0 * att.n_head * att.head_dim * q * cells
                total += 2.0 * att.indexer_heads * att.indexer_dim * q * att.indexer_cells(n)
        return total

    def _gpu_ubatch_seconds(self, m: int, work: float) -> float:
        """One ubatch of m tokens, `work` FLOPs, on the offload devices."""
        if len(self.mem.per_device) > 1:
            t = _devices_prefill_seconds(self.spec, self.target, self.mem, m, work)
        else:
            t = work / sum(device_flops(g, m) for g in self.target.gpus)
        # Never faster than one read of the device's weights, nor than its kernels' fixed costs.
        if self.gpu_bw:
            t = max(t, self.dev_weight_bytes / self.gpu_bw)
        t += self.n_gpu * DEVICE_KERNELS_PER_LAYER * GPU_PROMPT_KERNEL_S
        return t + self.host_copy_bytes(m) / (PCIE_GBPS * 1e9)

    @property
    def _assumed_rates(self) -> bool:
        """No device probe measured the offload devices: the rates are the assumed shares."""
        return all(g.measured is None for g in self.target.gpus)

    def host_copy_bytes(self, m: int) -> float:
        """Weight bytes in RAM a ubatch of m tokens copies to the GPU. llama.cpp's scheduler runs
        a big ubatch's products on the GPU (op offload, ggml-backend.cpp; CUDA from 32 tokens)
        and copies the weights over, of an expert tensor only the experts the ubatch's tokens
        were routed to (1 - (1 - used/all)^m of them, spread evenly)."""
        total = 0.0
        for layer, on, moved in zip(self.table.layers, self.on_gpu, self.experts_on_host, strict=True):
            if on and not moved:
                continue
            for mat in layer.matrices:
                if on and mat.expert_share >= 1.0:
                    continue  # the GPU holds the rest of a layer whose experts are in RAM
                total += mat.bytes_total * (1.0 - (1.0 - mat.expert_share) ** m)
        out = self.table.output
        if not self.output_on_gpu and out is not None:
            total += out.bytes_total
        return total


def _device_decode_seconds(
    spec: ModelSpec, target: Target, mem: MemoryBreakdown, n_tokens: int, moved_active: tuple[float, ...] = ()
) -> float:
    """One token on the offload devices: each reads its layers' weights (less `moved_active`, per
    layer what it reads in RAM: experts --n-cpu-moe keeps there) and KV at its own bandwidth, one
    after the other (a single sequence does not overlap them); where the token crosses to or
    from an RPC host it pays a round trip and the activations over the network."""
    out_bytes, _ = _output_read(spec)
    total = 0.0
    for d, gpu in enumerate(target.gpus[: len(mem.per_device)]):
        layers = mem.device_layers(d)
        read = sum(spec.layer_active_bytes[il] - (moved_active[il] if moved_active else 0.0) for il in layers)
        read += _kv_read_on(mem, spec, n_tokens, d)
        if mem.output_device == d:
            read += out_bytes
        if not read:
            continue
        n_layers = len(layers) + (mem.output_device == d)
        total += read / device_decode_bps(gpu) + GPU_TOKEN_OVERHEAD_S + device_layer_overhead_s(gpu) * n_layers
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


def _devices_prefill_seconds(spec: ModelSpec, target: Target, mem: MemoryBreakdown, ub: int, flops: float) -> float:
    """A ubatch through several devices: each does its layers' share of the work; pipelined
    (every layer offloaded), llama.cpp keeps them all busy on successive ubatches, so the slowest
    sets the pace, else they take turns. Hops to RPC hosts carry the ubatch's hidden states."""
    n = max(len(mem.layer_devices), 1)
    times = []
    for d, gpu in enumerate(target.gpus[: len(mem.per_device)]):
        share = len(mem.device_layers(d)) / n
        if share:
            times.append(share * flops / device_flops(gpu, ub))
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


def corrected_decode_seconds(t_step: float, t_shallow: float, decode_factor: float) -> float:
    """A decode step the model prices at `t_step` with replies' `decode_factor` applied: to the
    part that does not grow with the context (`t_shallow`, the step with one token in the cache),
    not to the attention over it. Replies are mostly shallow (a chat's turns: 40-750 tokens), so
    what they measure is that part; scaled whole, their correction made deep steps too fast
    (docs/speed-model.md, decision log, "Replies correct a decode step's shallow part")."""
    return t_shallow / decode_factor + max(0.0, t_step - t_shallow)


def shallow_decode_ratio(measured_s: float, t_step: float, t_shallow: float) -> float:
    """The decode factor that makes `corrected_decode_seconds` equal a reply's measured step: its
    time less the attention the model prices, against the shallow step (floored at a twentieth of
    it: a reply deep enough for attention to be most of it says little about the rest)."""
    attention = max(0.0, t_step - t_shallow)
    return t_shallow / max(0.05 * t_shallow, measured_s - attention)


def predict_speed(spec: ModelSpec, settings: Settings, target: Target, mem: MemoryBreakdown) -> SpeedPrediction:
    model = SpeedModel(spec, settings, target, mem)
    factors = target.factors_for(backend_key(target, settings), calibration_model(spec, settings, target))
    t0 = model.decode_seconds(1)
    t_full = corrected_decode_seconds(model.decode_seconds(settings.n_ctx), t0, factors.decode)
    n_prompt = max(1, min(HEADLINE_PROMPT_TOKENS, settings.n_ctx))
    t_prompt = model.prefill_seconds(n_prompt, 0)
    t_fill = model.prefill_seconds(settings.n_ctx, 0)
    dev_bytes, host_bytes = model.bytes_per_token(1)
    return SpeedPrediction(
        decode_tps=factors.decode / t0 if t0 > 0 else 0.0,
        decode_tps_full_ctx=1.0 / t_full if t_full > 0 else 0.0,
        prefill_tps=factors.prefill * n_prompt / t_prompt if t_prompt > 0 else 0.0,
        prefill_tps_full_ctx=factors.prefill * settings.n_ctx / t_fill if t_fill > 0 else 0.0,
        device_bytes_per_token=int(dev_bytes),
        host_bytes_per_token=int(host_bytes),
        decode_factor=factors.decode,
        prefill_factor=factors.prefill,
        calibration_replies=factors.n_replies,
        calibration_model=factors.model,
    )


def _cells(mem: MemoryBreakdown, spec: ModelSpec, il: int) -> int:
    kv = mem.kv
    return kv.n_cells_swa if (spec.swa_layers[il] and kv.n_cells_swa) else kv.n_cells
