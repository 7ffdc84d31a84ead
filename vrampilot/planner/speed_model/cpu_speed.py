"""Time per token on the CPU: the weights, the attention and the graph's fixed cost, each at the rate
llama.cpp's own kernels reach on this machine (speed/host_probe.py), or at assumed rates without a probe.

Decoding one token runs every weight matrix once as a mat-vec product; the probe measured, per
weight type, how many bytes of weights per second that kernel gets through with the weights in RAM,
which already holds whichever of memory bandwidth and arithmetic limits that type. Attention reads
the cache cells in use with flash attention at its own rate per KV type and head size. Each step
also has fixed costs the probe measured on a tiny model: the step itself, each layer's graph nodes
(each ends in a barrier of all threads), and the sampler's pass over the logits.

Reading a prompt runs the same matrices as mat-mat products over each ubatch, at the measured
FLOP rate, but never faster than streaming the weights once per ubatch (short prompts are
memory-bound like decoding); attention over the cache and the ubatch itself (causal: a query sees
the cells before it); the output matrix for the last token of each batch only, as llama-cpp-python
asks for no other logits.

Both then take what the whole graph costs beyond its kernels from the probe's run of the built-in
model (`GraphFactors`, planner/speed_model/graph_factors.py): one factor for weights and fixed costs, one for
attention over the cache, each for decoding and for prompts.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory.kv import DSV4_CSA_RATIO
from vrampilot.planner.target import DEFAULT_CPU_GFLOPS_PER_CORE, DEFAULT_HOST_BANDWIDTH_GBPS
from vrampilot.speed import LONG_ROW, SHORT_ROW, SHORTEST_ROW, FixedCosts, HostProbe, RateAt, bits_per_weight, rate_at

# Without a probe: of the assumed RAM bandwidth (planner/target.py) CPU decoding reaches this
# share, saturated by this many threads; of the assumed per-core throughput, these shares.
ASSUMED_BANDWIDTH_EFFICIENCY = 0.6
ASSUMED_THREADS_TO_SATURATE_MEMORY = 4
ASSUMED_MATVEC_EFFICIENCY = 0.33  # share of that throughput a mat-vec product reaches
ASSUMED_MATMUL_EFFICIENCY = 0.7
ASSUMED_ATTN_DECODE_GFLOPS_PER_CORE = 10.0
ASSUMED_ATTN_PREFILL_GFLOPS_PER_CORE = 35.0
ASSUMED_FIXED = FixedCosts(step_s=100e-6, layer_s=20e-6, vocab_entry_s=5e-9)
# Working graph nodes of the probe's tiny Llama block, whose fixed cost the probe measured; other
# blocks cost in proportion to their own node count.
PROBE_LAYER_NODES = 19

# Graph nodes of a layer's routed experts (three expert products, the activation, the weighting by
# the router, the sum): what a layer whose experts are in RAM runs on the CPU beside the products.
EXPERT_NODES = 6
# The tiled flash-attention kernel needs this many queries (GGML_FA_TILE_Q); fewer run the vector
# kernel at the decoding rate.
FA_TILE_QUERIES = 64
# llama.cpp attends over a view of the cache padded to this many cells (llama_kv_cache::get_n_kv),
# and from a view this long on, with an f16 or f32 cache, decoding splits the view's cells evenly
# over the threads (ggml-cpu's flash_attn_ext split-KV path) instead of handing out query heads.
KV_VIEW_PAD = 256
SPLIT_KV_MIN_VIEW = 512


@dataclass(frozen=True)
class _Matrix:
    type_name: str  # lower case ggml name
    row: int  # elements per row (ne[0]): the kernels' per-row cost depends on it
    bytes_active: float  # read per decoded token (experts: the routed share)
    params_active: float
    bytes_total: int  # read once per ubatch when reading a prompt (every expert gets some tokens)
    expert_share: float  # 1.0, or n_expert_used / n_expert for expert tensors


@dataclass(frozen=True)
class _LayerCost:
    matrices: tuple[_Matrix, ...]
    n_nodes: int  # graph nodes of one layer that do work (views and reshapes cost nothing)
    # Elementwise steps per token: (op as the probe times it, f32 elements), see `_elementwise`.
    elementwise: tuple[tuple[str, int], ...] = ()


# Architectures whose feed-forward activation llama.cpp builds as GELU (LLM_FFN_GELU in its
# src/models/*.cpp); every other one as SiLU. On the CPU it was measured on a gated GELU costs 1.9 ns per
# element at one thread, a gated SiLU 0.15.
GELU_ARCHITECTURES = frozenset(
    {
        "bert",
        "bloom",
        "codeshell",
        "falcon",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3n",
        "gemma4",
        "gemma-embedding",
        "gpt2",
        "gptneox",
        "grok",
        "mpt",
        "phi2",
        "starcoder",
        "starcoder2",
        "t5",
    }
)


def _elementwise(spec: ModelSpec, il: int) -> tuple[tuple[str, int], ...]:
    """What one token of layer `il` takes besides its matrix products and attention: each norm
    over its width (a per-head Q or K norm over all heads), the feed-forward's activation over its
    hidden width (the routed experts' and a shared expert's), RoPE over the Q and K heads."""
    ops: list[tuple[str, int]] = []
    act = "geglu" if spec.architecture in GELU_ARCHITECTURES else "swiglu"
    heads = (spec.n_head[il] if il < len(spec.n_head) else 0, spec.n_head_kv[il] if il < len(spec.n_head_kv) else 0)
    gated = any(t.name.endswith(("ffn_gate.weight", "ffn_gate_exps.weight")) for t in spec.layer_tensors(il))
    for t in spec.layer_tensors(il):
        name = t.name.split(".", 2)[2]
        if "norm" in name and (len(t.shape) < 2 or t.shape[1] == 1):
            width = t.shape[0]
            if width == spec.head_dim_k and name.startswith(("attn_q_norm", "attn_k_norm")):
                width *= heads[0] if name.startswith("attn_q_norm") else heads[1]
            ops.append(("norm", width))
        elif (
            name in ("ffn_gate.weight", "ffn_gate_shexp.weight", "ffn_gate_exps.weight")
            or (not gated and name == "ffn_up.weight")
        ) and len(t.shape) >= 2:
            routed = spec.n_expert_used if name == "ffn_gate_exps.weight" else 1
            ops.append((act, t.shape[1] * routed))
    if spec.n_rot > 0 and heads[1] > 0 and spec.head_dim_k > 0:
        ops.append(("rope", (heads[0] + heads[1]) * spec.head_dim_k))
    return tuple(ops)


@dataclass(frozen=True)
class WeightTable:
    layers: tuple[_LayerCost, ...]
    output: _Matrix | None
    n_vocab: int  # logits per step, which the sampler goes through

    def types(self) -> tuple[str, ...]:
        names = {m.type_name for layer in self.layers for m in layer.matrices}
        if self.output is not None:
            names.add(self.output.type_name)
        return tuple(sorted(names))


@functools.lru_cache(maxsize=16)
def weight_table(spec: ModelSpec) -> WeightTable:
    """The matrices each layer multiplies, by type: what the speed model prices (cached per file)."""
    share = spec.n_expert_used / spec.n_expert if spec.n_expert else 1.0
    per_layer: list[list[_Matrix]] = [[] for _ in range(spec.n_layer)]
    n_tensors = [0] * spec.n_layer
    output: _Matrix | None = None
    out_name = "token_embd.weight" if spec.tied_embeddings else "output.weight"
    for t in spec.tensors:
        if t.name == out_name:
            output = _Matrix(t.type_name.lower(), t.shape[0], t.n_bytes, t.n_elements, t.n_bytes, 1.0)
        if not t.name.startswith("blk."):
            continue
        il = int(t.name.split(".", 2)[1])
        if il >= spec.n_layer:
            continue
        n_tensors[il] += 1
        if len(t.shape) < 2 or t.shape[1] == 1:
            continue  # norms and biases: elementwise work, priced as graph nodes
        s = share if "_exps" in t.name and spec.n_expert else 1.0
        per_layer[il].append(_Matrix(t.type_name.lower(), t.shape[0], t.n_bytes * s, t.n_elements * s, t.n_bytes, s))
    # About two working nodes per tensor (the product or norm, and what combines it) plus the
    # attention, the residual adds and the cache writes: 19 for a Llama block of 9 tensors.
    layers = tuple(
        _LayerCost(tuple(m), 2 * n + 1, _elementwise(spec, il))
        for il, (m, n) in enumerate(zip(per_layer, n_tensors, strict=True))
    )
    return WeightTable(layers, output, spec.n_vocab)


def _by_row(points: list[tuple[int, float]], row: int) -> float:
    """A rate between the row lengths measured (ascending), by the log of the row; constant outside."""
    if row <= points[0][0]:
        return points[0][1]
    for (r0, v0), (r1, v1) in itertools.pairwise(points):
        if row <= r1:
            return v0 + (v1 - v0) * math.log2(row / r0) / math.log2(r1 / r0)
    return points[-1][1]


@dataclass(frozen=True)
class GraphFactors:
    """The built-in model's real steps over what the kernels' rates predict for them, per thread
    count (planner/speed_model/graph_factors.py): what a whole graph costs beyond the sum of its kernels."""

    decode_base: tuple[RateAt, ...]  # a decode step's weights and fixed costs
    decode_attention: tuple[RateAt, ...]  # its attention over the cache
    prefill_base: tuple[RateAt, ...]  # a prompt's matrices and per-ubatch costs
    prefill_attention: tuple[RateAt, ...]  # its attention over the cache and the ubatch

    def decode(self, threads: int) -> tuple[float, float]:
        return rate_at(self.decode_base, threads), rate_at(self.decode_attention, threads)

    def prefill(self, threads: int) -> tuple[float, float]:
        return rate_at(self.prefill_base, threads), rate_at(self.prefill_attention, threads)


@dataclass(frozen=True)
class CpuRates:
    """The CPU's rates as the speed model reads them: measured by the probe, or assumed."""

    probe: HostProbe | None
    physical_cores: int
    host_bandwidth_gbps: float = DEFAULT_HOST_BANDWIDTH_GBPS  # assumed peak, without a probe
    graph: GraphFactors | None = None  # what the built-in model's real steps add (None: not measured)
    # Rates already looked up: the planner prices every matrix of every alternative, thousands of
    # look-ups of a handful of (type, threads, row) keys (planning a 16M context took seconds).
    _memo: dict[tuple[object, ...], float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _cached(self, key: tuple[object, ...], compute: Callable[[], float]) -> float:
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = compute()
        return value

    @property
    def measured(self) -> bool:
        return self.probe is not None

    def _nearest_kernel(self, type_name: str) -> tuple[str, bool]:
        """(the measured type standing in for `type_name`, whether it is the type itself)."""
        assert self.probe is not None
        if self.probe.kernel(type_name) is not None:
            return type_name, True
        try:
            bpw = bits_per_weight(type_name)
        except KeyError:
            bpw = 4.5
        measured = [k.type_name for k in self.probe.kernels]
        if not measured:
            return type_name, False
        return min(measured, key=lambda n: abs(bits_per_weight(n) - bpw)), False

    def stand_ins(self, types: tuple[str, ...]) -> dict[str, str]:
        """Weight types without a measurement, and the measured type each is predicted from."""
        if self.probe is None:
            return {}
        out = {}
        for t in types:
            near, exact = self._nearest_kernel(t)
            if not exact:
                out[t] = near
        return out

    def _assumed_bandwidth(self, threads: int) -> float:
        share = min(1.0, threads / min(ASSUMED_THREADS_TO_SATURATE_MEMORY, self.physical_cores))
        return self.host_bandwidth_gbps * ASSUMED_BANDWIDTH_EFFICIENCY * share

    def _core_share(self, threads: int) -> float:
        return min(threads, self.physical_cores)

    def decode_gbps(self, type_name: str, threads: int, row: int = LONG_ROW) -> float:
        """Weight bytes per second through the mat-vec kernel of `type_name` over rows of `row`."""
        return self._cached(("decode", type_name, threads, row), lambda: self._decode_gbps(type_name, threads, row))

    def _decode_gbps(self, type_name: str, threads: int, row: int) -> float:
        if self.probe is not None:
            near, _ = self._nearest_kernel(type_name)
            k = self.probe.kernel(near)
            if k is not None:
                points = [(SHORT_ROW, k.decode_short_gbps), (LONG_ROW, k.decode_gbps)]
                if k.decode_shortest_gbps:
                    points.insert(0, (SHORTEST_ROW, k.decode_shortest_gbps))
                return _by_row([(r, rate_at(rates, threads)) for r, rates in points], row)
        try:
            bytes_per_param = bits_per_weight(type_name) / 8
        except KeyError:
            bytes_per_param = 0.5625
        compute = DEFAULT_CPU_GFLOPS_PER_CORE * ASSUMED_MATVEC_EFFICIENCY * self._core_share(threads)
        # 2 FLOPs per weight: the kernel's byte rate is capped by arithmetic as well as by RAM.
        return min(self._assumed_bandwidth(threads), compute / 2 * bytes_per_param)

    def prefill_gflops(self, type_name: str, threads: int, *, experts: bool = False) -> float:
        """Matrix throughput over a prompt's ubatch; `experts`: through the mixture-of-experts product."""
        return self._cached(
            ("prefill", type_name, threads, experts), lambda: self._prefill_gflops(type_name, threads, experts)
        )

    def _prefill_gflops(self, type_name: str, threads: int, experts: bool) -> float:
        if self.probe is not None:
            near, _ = self._nearest_kernel(type_name)
            k = self.probe.kernel(near)
            if k is not None:
                rates = k.prefill_moe_gflops if experts and k.prefill_moe_gflops else k.prefill_gflops
                return rate_at(rates, threads)
        return DEFAULT_CPU_GFLOPS_PER_CORE * ASSUMED_MATMUL_EFFICIENCY * self._core_share(threads)

    def attention_cell_seconds(self, kv_type: str, head_dim: float, threads: int, *, prefill: bool) -> float:
        """Seconds flash attention spends on one cache cell for one query head of `head_dim` (K and
        V) with the cache in the CPU's caches.

        The probe measured two head sizes; the cost per cell is taken as linear in the head size
        through them (a fixed part per cell, a part per element), extrapolated outside.
        """
        key = ("attention", kv_type, head_dim, threads, prefill)
        return self._cached(key, lambda: self._attention_cell_seconds(kv_type, head_dim, threads, prefill))

    def _attention_cell_seconds(self, kv_type: str, head_dim: float, threads: int, prefill: bool) -> float:
        if self.probe is None or not (self.probe.attention_for(kv_type) or self.probe.attention_for("f16")):
            per_core = ASSUMED_ATTN_PREFILL_GFLOPS_PER_CORE if prefill else ASSUMED_ATTN_DECODE_GFLOPS_PER_CORE
            return 4.0 * head_dim / (per_core * self._core_share(threads) * 1e9)
        rates = self.probe.attention_for(kv_type) or self.probe.attention_for("f16")
        return _linear_in_head_dim(
            [(a.head_dim, a.prefill_gflops if prefill else a.decode_gflops) for a in rates], head_dim, threads
        )

    def attention_ram_cell_seconds(self, kv_type: str, head_dim: float, threads: int) -> float:
        """What reading one cell of one KV head (K and V) from RAM adds while decoding: a model's
        whole cache is larger than the CPU's caches, so every step streams it. Query heads that
        share a KV head (grouped-query attention) read it once and find it cached after that.
        Measured with an f16 cache; a quantized cache adds it for its fewer bytes."""
        key = ("attention-ram", kv_type, head_dim, threads)
        return self._cached(key, lambda: self._attention_ram_cell_seconds(kv_type, head_dim, threads))

    def _attention_ram_cell_seconds(self, kv_type: str, head_dim: float, threads: int) -> float:
        if self.probe is None:
            return 0.0
        f16 = self.probe.attention_for("f16")
        if not any(a.decode_ram_gflops for a in f16):
            return 0.0
        in_cache = _linear_in_head_dim([(a.head_dim, a.decode_gflops) for a in f16], head_dim, threads)
        from_ram = _linear_in_head_dim([(a.head_dim, a.decode_ram_gflops) for a in f16], head_dim, threads)
        return max(0.0, from_ram - in_cache) * _kv_bytes_per_element(kv_type) / 2.0

    def elementwise_s(self, op: str, threads: int) -> float:
        """Seconds per f32 element of an elementwise step (0 where the probe did not time it: the
        built-in model's graph factor then stands for them, as before the probe did)."""
        return self._cached(("elementwise", op, threads), lambda: self._elementwise_s(op, threads))

    def _elementwise_s(self, op: str, threads: int) -> float:
        rates = self.probe.elementwise_for(op) if self.probe is not None else None
        return rate_at(rates.ns_per_element, threads) * 1e-9 if rates is not None else 0.0

    def matvec_overhead_s(self, type_name: str, threads: int) -> float:
        """What one mat-vec of `type_name` costs in a decode step beyond its bytes at the kernel's
        rate (0 where not measured: the graph factor carries it, as before the probe timed it)."""
        return self._cached(("matvec", type_name, threads), lambda: self._matvec_overhead_s(type_name, threads))

    def _matvec_overhead_s(self, type_name: str, threads: int) -> float:
        if self.probe is None:
            return 0.0
        k = self.probe.kernel(self._nearest_kernel(type_name)[0])
        return rate_at(k.matvec_overhead_us, threads) * 1e-6 if k is not None and k.matvec_overhead_us else 0.0

    def fixed(self, threads: int) -> FixedCosts:
        """What a step costs besides weights and attention (measured with the probe's tiny model)."""
        if self.probe is not None and self.probe.steps:
            return self.probe.fixed_costs(threads)
        return ASSUMED_FIXED


def _linear_in_head_dim(points: list[tuple[int, tuple[RateAt, ...]]], head_dim: float, threads: int) -> float:
    """Seconds per head-cell at `head_dim`, through the measured (head size, FLOP rate) points."""
    secs = sorted((d, 4.0 * d / (rate_at(r, threads) * 1e9)) for d, r in points if rate_at(r, threads) > 0)
    if not secs:
        return 0.0
    if len(secs) == 1:
        return secs[0][1] * head_dim / secs[0][0]
    (d0, t0), (d1, t1) = secs[0], secs[-1]
    return max(t0 * 0.1, t0 + (t1 - t0) * (head_dim - d0) / (d1 - d0))


def _kv_bytes_per_element(kv_type: str) -> float:
    try:
        return bits_per_weight(kv_type) / 8
    except KeyError:
        return 2.0


@dataclass(frozen=True)
class AttentionShape:
    """One layer's attention: how many query heads, their size (mean of K and V), its cache length."""

    n_head: int
    head_dim: float
    cells: int  # the cache cells the layer can see (the window for sliding-window layers)
    n_head_kv: int = 0  # KV heads the query heads share (0: one per query head)
    # A sliding-window layer's whole cache (the window plus a ubatch, padded), a ring its positions
    # go round; 0 for a layer that sees every cell it holds.
    ring_cells: int = 0
    # DeepSeek-V4's compressed attention (0 elsewhere): the layer's compression ratio (4: CSA with
    # the lightning indexer, 128: HCA), the raw window every query sees, the compressed entries a
    # CSA query keeps (the indexer's top-k), and the indexer's heads and key length.
    compress_ratio: int = 0
    raw_window: int = 0
    top_k: int = 0
    indexer_heads: int = 0
    indexer_dim: int = 0

    @property
    def sliding(self) -> bool:
        return self.ring_cells > 0 and not self.compress_ratio

    def attended_cells(self, n_tokens: int) -> int:
        """Cells one decoded query reads with n_tokens in the context: all it may see, or for
        DeepSeek-V4 the raw window, then a CSA layer's top-k compressed entries or an HCA
        layer's every compressed entry."""
        n = max(n_tokens, 1)
        if not self.compress_ratio:
            return min(n, self.cells)
        comp = n // self.compress_ratio
        if self.indexer_heads:
            comp = min(comp, self.top_k)
        return min(n, self.raw_window) + comp

    def indexer_cells(self, n_tokens: int) -> int:
        """Indexer keys one decoded query scores (DeepSeek-V4's CSA layers: every compressed one)."""
        return max(n_tokens, 1) // self.compress_ratio if self.indexer_heads else 0


def attention_shapes(spec: ModelSpec, cells_of: Callable[[int], int]) -> tuple[AttentionShape | None, ...]:
    """Each layer's attention as the speed model prices it, `cells_of(il)` the cache cells of layer il
    (None for layers without attention: recurrent ones)."""
    if spec.is_mla:
        # MLA attends in the latent space: K is the latent plus the RoPE part, V the latent.
        dk, dv = spec.kv_lora_rank + spec.n_rot, spec.kv_lora_rank
    else:
        dk, dv = spec.head_dim_k, spec.head_dim_v
    out: list[AttentionShape | None] = []
    for il in range(spec.n_layer):
        if spec.recurrent_layers[il] or not spec.n_head_kv[il]:
            out.append(None)
            continue
        # MLA's latent is one cache row that every head reads.
        n_kv = 1 if spec.is_mla else spec.n_head_kv[il]
        cells = ring = cells_of(il)
        if spec.compress_ratios and spec.compress_ratios[il]:
            ratio = spec.compress_ratios[il]
            csa = ratio == DSV4_CSA_RATIO
            out.append(
                AttentionShape(
                    spec.n_head[il],
                    (dk + dv) / 2,
                    cells,
                    n_kv,
                    compress_ratio=ratio,
                    raw_window=spec.sliding_window,
                    top_k=spec.indexer_top_k if csa else 0,
                    indexer_heads=spec.indexer_n_head if csa else 0,
                    indexer_dim=spec.indexer_head_size if csa else 0,
                )
            )
            continue
        if spec.swa_layers[il] and spec.sliding_window:
            # A sliding-window layer's cache holds the window plus a ubatch, but a query sees the
            # window only, and the CPU kernel skips the masked rest.
            cells = min(cells, spec.sliding_window)
        else:
            ring = 0
        out.append(AttentionShape(spec.n_head[il], (dk + dv) / 2, cells, n_kv, ring_cells=ring))
    return tuple(out)


def causal_cells(m: int, pos: int, window: int) -> float:
    """Cells the m queries of a ubatch starting at `pos` attend to in all: query i sees pos + i + 1
    of them (the causal mask skips the rest, tile by tile), at most `window`."""
    k = max(0, min(m, window - pos))  # queries whose view is not yet capped by the window
    return k * pos + k * (k + 1) / 2 + (m - k) * window


@functools.lru_cache(maxsize=4096)
def decode_attention_imbalance(
    n_used: int, n_cells: int, n_head: int, threads: int, kv_type: str, window: int = 0
) -> float:
    """How much longer a decode step's flash attention takes than its work spread evenly over the
    threads (what the probe's kernels measured): `n_used` positions in the cache (the new token's
    included) of `n_cells`; a sliding-window layer (`window`) sees the last `window` of them.

    Split over the cells, each thread takes an equal slice of the padded view and the masked tail
    costs nothing, so the first threads do all the work of theirs: 1030 cells in a view of 1280 on
    2 threads are 640 + 390, 1.24x the even split, and 4128 in 4352 only 1.05x. Unmodelled, the built-in
    model's run at 1030 cells teaches that excess to the attention factor, which then prices deep
    steps too slow. Split over the query heads (quantized caches, short views), the busiest thread takes the most heads.

    A sliding-window layer's cache is a ring of the window plus a ubatch: position p sits in cell
    p mod `n_cells` (llama_kv_cache::find_slot reuses the cells the window has left), and the view
    covers the whole ring once it went round. Its window is a run of cells that one slice can hold
    nearly whole: the 1001st token's window of 512 in a Gemma 3 layer's 1024 cells is 23 + 489 on 2 threads.
    Taken as spread evenly, such steps are priced faster than llama.cpp runs them, and shallower
    replies corrected by that move them further. Measurements and error ranges: docs/speed-model.md,
    decision log, "Sliding windows and the busiest thread"."""
    if threads <= 1 or n_used <= 0 or n_head <= 0:
        return 1.0
    filled = min(n_used, n_cells)
    view = min(n_cells, max(KV_VIEW_PAD, -(-filled // KV_VIEW_PAD) * KV_VIEW_PAD))
    if kv_type in ("f16", "f32") and view >= SPLIT_KV_MIN_VIEW:
        chunk = -(-view // threads)
        seen = min(filled, window) if window > 0 else filled
        start = (n_used - seen) % n_cells if window > 0 else 0
        # The seen cells: one run from `start`, wrapping past the ring's end.
        runs = [(start, min(start + seen, n_cells)), (0, max(0, start + seen - n_cells))]
        busiest = max(
            sum(max(0, min(hi, min(view, (i + 1) * chunk)) - max(lo, i * chunk)) for lo, hi in runs)
            for i in range(threads)
        )
        return threads * busiest / seen
    # Rows (query heads) in chunks of a quarter thread's share, handed out in turn.
    rows = max(1, -(-n_head // (4 * threads)))
    n_chunks = -(-n_head // rows)
    if n_chunks < threads:
        n_chunks = threads
    rows = -(-n_head // n_chunks)
    sizes = [max(0, min(rows, n_head - c * rows)) for c in range(n_chunks)]
    busiest = max(sum(sizes[i::threads]) for i in range(threads))
    return threads * busiest / n_head


def decode_seconds(
    table: WeightTable,
    layers_on_cpu: tuple[bool, ...],
    output_on_cpu: bool,
    attention: tuple[AttentionShape | None, ...],
    n_tokens: int,
    kv_type: str,
    threads: int,
    rates: CpuRates,
    experts_on_cpu: tuple[bool, ...] = (),
) -> float:
    """Seconds the CPU spends on one decoded token with n_tokens in the cache. `experts_on_cpu`:
    per layer, whether the routed experts of a layer otherwise on the GPU run here (--n-cpu-moe)."""
    t = t_att = 0.0
    fixed = rates.fixed(threads)
    for il, (on_cpu, layer, att) in enumerate(zip(layers_on_cpu, table.layers, attention, strict=True)):
        if not on_cpu:
            if il < len(experts_on_cpu) and experts_on_cpu[il]:
                # Only the expert products run here: the routed share of each expert tensor, and
                # their graph nodes (the three expert products, the activation, the weighting).
                t += sum(
                    m.bytes_active / (rates.decode_gbps(m.type_name, threads, m.row) * 1e9)
                    + rates.matvec_overhead_s(m.type_name, threads)
                    for m in layer.matrices
                    if m.expert_share < 1.0
                )
                t += fixed.layer_s * EXPERT_NODES / PROBE_LAYER_NODES
            continue
        # Each product at its kernel's rate, plus what it costs as one node of a chain of them: with
        # 2 threads a model of 92-737 KB matrices ran its products at 0.7x the rate one large matrix
        # reads at (docs/speed-model.md), which the built-in model's graph factor,
        # fitted on other matrices, did not carry over.
        t += sum(
            m.bytes_active / (rates.decode_gbps(m.type_name, threads, m.row) * 1e9)
            + rates.matvec_overhead_s(m.type_name, threads)
            for m in layer.matrices
        )
        t += fixed.layer_s * layer.n_nodes / PROBE_LAYER_NODES
        if att is not None:
            cell = rates.attention_cell_seconds(kv_type, att.head_dim, threads, prefill=False)
            ram = rates.attention_ram_cell_seconds(kv_type, att.head_dim, threads)
            # The kernel skips the masked cells of llama.cpp's padded view: only those in use cost,
            # at the pace of the busiest thread.
            used = att.attended_cells(n_tokens)
            if att.indexer_heads:
                # DeepSeek-V4's lightning indexer scores every compressed key with its own heads
                # before the top-k are kept: attention-like work over a quarter of the context.
                idx = rates.attention_cell_seconds(kv_type, att.indexer_dim, threads, prefill=False)
                t_att += att.indexer_cells(n_tokens) * att.indexer_heads * idx
            if att.compress_ratio:
                uneven = 1.0
            elif att.sliding:
                uneven = decode_attention_imbalance(
                    max(n_tokens, 1) + 1, att.ring_cells, att.n_head, threads, kv_type, window=att.cells
                )
            else:
                uneven = decode_attention_imbalance(used + 1, att.cells, att.n_head, threads, kv_type)
            t_att += used * (att.n_head * cell + (att.n_head_kv or att.n_head) * ram) * uneven
    out = table.output
    if output_on_cpu and out is not None:
        t += out.bytes_active / (rates.decode_gbps(out.type_name, threads, out.row) * 1e9)
        t += rates.matvec_overhead_s(out.type_name, threads) + fixed.step_s
    # The sampler goes through every logit on the CPU, wherever they were computed.
    t += table.n_vocab * fixed.vocab_entry_s
    f_base, f_att = rates.graph.decode(threads) if rates.graph is not None else (1.0, 1.0)
    return f_base * t + f_att * t_att


def prefill_seconds(
    table: WeightTable,
    layers_on_cpu: tuple[bool, ...],
    output_on_cpu: bool,
    attention: tuple[AttentionShape | None, ...],
    n_tokens: int,
    n_past: int,
    n_batch: int,
    n_ubatch: int,
    kv_type: str,
    threads: int,
    rates: CpuRates,
) -> float:
    """Seconds the CPU spends reading n_tokens of prompt after n_past tokens already in the cache."""
    if n_tokens <= 0:
        return 0.0
    ub = max(1, min(n_ubatch, n_batch))
    fixed = rates.fixed(threads)
    nodes = sum(layer.n_nodes for layer, on in zip(table.layers, layers_on_cpu, strict=True) if on)
    per_ubatch = fixed.step_s + fixed.layer_s * nodes / PROBE_LAYER_NODES
    t = table.n_vocab * fixed.vocab_entry_s  # sampling the reply's first token ends the prefill
    # Every full ubatch multiplies the same matrices: priced once (a prompt filling a 128K context
    # has 256 of them, and the planner prices every alternative).
    full, rest = divmod(n_tokens, ub)
    t += full * (_weights_seconds(table, layers_on_cpu, ub, threads, rates) + per_ubatch)
    if rest:
        t += _weights_seconds(table, layers_on_cpu, rest, threads, rates) + per_ubatch
    # Norms, activations and RoPE over every token: with fast matrix kernels a share worth pricing
    # (Gemma 3's gated GELU took 7% of its ubatch), and one the built-in model's factor cannot
    # carry to another model (a Llama block's SiLU costs an eighth of a GELU).
    t += n_tokens * sum(
        rates.elementwise_s(op, threads) * n
        for layer, on in zip(table.layers, layers_on_cpu, strict=True)
        if on
        for op, n in layer.elementwise
    )
    # Attention: the cells all queries of the full ubatches see, at one rate (their ubatch size
    # picks the kernel), then the last partial ubatch at its own; no loop over ubatches (a 16M
    # context has 32K of them).
    t_att = _attention_seconds(layers_on_cpu, attention, full * ub, ub, n_past, kv_type, threads, rates)
    if rest:
        t_att += _attention_seconds(layers_on_cpu, attention, rest, rest, n_past + full * ub, kv_type, threads, rates)
    out = table.output
    if output_on_cpu and out is not None:
        # One output row per batch: the logits of its last token.
        n_batches = math.ceil(n_tokens / max(1, n_batch))
        t += n_batches * out.bytes_active / (rates.decode_gbps(out.type_name, threads, out.row) * 1e9)
    f_base, f_att = rates.graph.prefill(threads) if rates.graph is not None else (1.0, 1.0)
    return f_base * t + f_att * t_att


def _weights_seconds(
    table: WeightTable, layers_on_cpu: tuple[bool, ...], m: int, threads: int, rates: CpuRates
) -> float:
    """One ubatch of m tokens through the matrices of the layers on the CPU."""
    t = 0.0
    for on_cpu, layer in zip(layers_on_cpu, table.layers, strict=True):
        if not on_cpu:
            continue
        for mat in layer.matrices:
            gflops = rates.prefill_gflops(mat.type_name, threads, experts=mat.expert_share < 1.0)
            compute = 2.0 * mat.params_active * m / (gflops * 1e9)
            # Each ubatch streams the weights at least once: every expert once enough tokens
            # are routed (1 - (1 - share)^m of them), dense weights always.
            touched = mat.bytes_total * (1.0 - (1.0 - mat.expert_share) ** m)
            stream = touched / (rates.decode_gbps(mat.type_name, threads, mat.row) * 1e9)
            t += max(compute, stream)
    return t


def _attention_seconds(
    layers_on_cpu: tuple[bool, ...],
    attention: tuple[AttentionShape | None, ...],
    n_queries: int,
    ubatch: int,
    pos: int,
    kv_type: str,
    threads: int,
    rates: CpuRates,
) -> float:
    """Attention of n_queries prompt tokens starting at `pos`, read in ubatches of `ubatch`."""
    t = 0.0
    for on_cpu, att in zip(layers_on_cpu, attention, strict=True):
        if on_cpu and att is not None and n_queries > 0:
            # The tiled kernel takes a batch of 64 queries or more; fewer run the vector kernel.
            per_cell = rates.attention_cell_seconds(kv_type, att.head_dim, threads, prefill=ubatch >= FA_TILE_QUERIES)
            t += att.n_head * causal_cells(n_queries, pos, att.cells) * per_cell
    return t
