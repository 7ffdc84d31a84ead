"""Compute and output buffer sizes: a fitted model of llama.cpp's graph allocator.

llama.cpp sizes the compute buffer by building the worst-case graph (n_ubatch tokens, as many
output rows as the context allows, Settings.n_outputs_max; the whole KV cache visible) and running
ggml's graph allocator over it (sched_reserve in llama-context.cpp, ggml-alloc.c). The allocator
reuses the memory of dead tensors (best fit, inputs first), so the buffer is the peak of live
tensors plus fragmentation, not a sum. Measured here, the buffer is the heaviest phase, each
linear in n_ubatch for a fixed context:

- output:    the logits of the rows that ask for them, `n_vocab` f32 each: one per sequence, as the
             engine, the dry runs and llama-server reserve (Settings.n_outputs_max; exact), plus a
             few hidden-state rows per token;
- attention: the KQ masks (one per cache, `n_kv` f32 per token, f16 with flash attention; exact)
             plus, without flash attention, the score matrix `n_kv * n_head` f32 of the widest
             layer (exact), plus the activations that stay allocated around them (fitted);
- FFN:       gate/up/GLU activations (`n_ff`, or `n_expert_used * n_ff_exp` for MoE; fitted).
MLA without flash attention also copies V out of the latent cache once per layer
(`n_kv * kv_lora_rank`, not per token; exact).

What no formula captures is where the allocator happens to place the largest tensor: a few
n_embd-wide rows per token either way; the fit below says how far that goes, and on the tiny test
fixtures, where those rows are a large share of the buffer, it goes further (bench/planner.py
prints the current worst case). When exact numbers matter, an exact plan (the default of the CLI
and the window) asks llama.cpp itself in ~0.1 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from vrampilot.gguf import ModelSpec
from vrampilot.planner.memory.kv import KvBreakdown, effective_ubatch, kv_cache_bytes, kv_unified, row_bytes
from vrampilot.planner.memory.placement import (
    OP_OFFLOAD_MIN_BATCH,
    largest_held_offloaded_bytes,
    layers_per_device,
    offload_copy_bytes,
)
from vrampilot.planner.settings import Settings

F32 = 4

# Activation features, in f32 elements per token:
#   E  n_embd                      Q  n_head * head_dim_k (the query width; MLA: absorbed latent)
#   KV n_head_kv * (dk + dv)       F  dense n_ff (widest dense layer)
#   M  n_expert_used * n_ff_exp (+ shared experts)
#   X  n_expert (router logits)    U  n_expert_used * n_embd (per-expert outputs before the sum)
FEATURES = ("E", "Q", "KV", "F", "M", "X", "U")

# Fitted coefficients per model family and phase (f32 elements per token per unit of each feature).
# "out" is the extra beyond the logits (n_vocab); "attn" adds to the masks and the score matrix
# (flash attention off), "fa" to the masks (flash attention on), "ffn" stands alone. Fitted to
# llama.cpp's own dry runs, under-prediction weighed more than over-prediction, and rounded to
# quarters; the method, the shapes fitted and the error ranges per family: docs/exactness.md,
# "The compute-buffer formula". Re-fit with `python bench/planner.py --fit` (needs scipy). Coefficients of features a family
# lacks are 0. An exact plan replaces the formula with llama.cpp's own number.
FIT: dict[str, dict[str, tuple[float, ...]]] = {
    #            E     Q     KV    F     M     X     U
    "dense": {
        "out": (3.75,),
        "attn": (2.5, 1.5, 1.5, 0.25, 0.0, 0.0, 0.0),
        "fa": (2.0, 0.5, 0.5, 3.25, 0.0, 0.0, 0.0),
        "ffn": (2.75, 0.0, 0.75, 3.5, 0.0, 0.0, 0.0),
    },
    "moe": {
        "out": (2.25,),
        "attn": (2.25, 0.25, 5.0, 10.0, 1.0, 10.0, 0.0),
        "fa": (1.75, 1.0, 1.75, 10.0, 2.0, 10.0, 1.0),
        "ffn": (0.0, 2.25, 0.0, 10.0, 0.0, 10.0, 2.0),
    },
    "mla": {
        "out": (10.0,),
        "attn": (2.5, 1.0, 0.0, 1.25, 0.0, 0.0, 0.0),
        "fa": (1.25, 1.5, 1.25, 2.25, 0.0, 0.0, 0.0),
        "ffn": (3.25, 0.0, 2.25, 1.25, 0.0, 9.5, 0.5),
    },
}


@dataclass(frozen=True)
class ComputeTerms:
    """The quantities the compute model uses, per token unless said otherwise (exposed for the fit)."""

    n_tokens: int  # the ubatch llama.cpp reserves with
    n_vocab: int
    n_embd: int
    q_width: int
    kv_width: int
    ff_dense: int
    ff_moe: int
    mask_bytes: int  # all KQ masks, bytes per token
    kq_bytes: int  # widest score matrix without flash attention, bytes per token
    flash_attn: bool
    n_expert: int = 0
    experts_out: int = 0  # n_expert_used * n_embd
    fixed_bytes: int = 0  # not per token: MLA without flash attention copies V out of the latent cache
    family: str = "dense"
    n_outputs: int = 1  # logit rows reserved (Settings.n_outputs_max), not per token

    def features(self) -> tuple[int, ...]:
        return (self.n_embd, self.q_width, self.kv_width, self.ff_dense, self.ff_moe, self.n_expert, self.experts_out)


def compute_terms(spec: ModelSpec, settings: Settings) -> ComputeTerms:
    kv = kv_cache_bytes(spec, settings)
    n_main = spec.n_layer - spec.n_layer_nextn
    attn_layers = [
        il
        for il in range(n_main)
        if not (spec.recurrent_layers and spec.recurrent_layers[il]) and (spec.n_head_kv[il] or spec.is_mla)
    ]
    has_full = any(not spec.swa_layers[il] for il in attn_layers) if spec.has_swa else bool(attn_layers)
    has_swa = spec.has_swa and any(spec.swa_layers[il] for il in attn_layers)
    mask_elem = 2 if settings.flash_attn else F32
    mask = mask_elem * ((kv.n_cells if has_full else 0) + (kv.n_cells_swa if has_swa else 0))
    kq = 0
    for il in attn_layers:
        cells = kv.n_cells_swa if has_swa and spec.swa_layers[il] else kv.n_cells
        kq = max(kq, cells * spec.n_head[il] * F32)
    fixed = 0
    if spec.is_mla and not settings.flash_attn:
        # build_attn_mha: V is a transposed view of the latent K cache, made contiguous per layer
        fixed = kv.n_cells * kv.n_streams * row_bytes(settings.type_k, spec.kv_lora_rank)
    n_head = max(spec.n_head) if spec.n_head else 0
    n_head_kv = max(spec.n_head_kv) if spec.n_head_kv else 0
    moe_layers = _moe_layers(spec)
    ff_dense = max((spec.n_ff[il] for il in range(n_main) if il not in moe_layers), default=0)
    ff_moe = 0
    if spec.is_moe:
        ff_exp = spec.n_ff_expert or (max(spec.n_ff) // max(spec.n_expert_used, 1) if spec.n_ff else 0)
        ff_moe = ff_exp * (spec.n_expert_used + spec.n_expert_shared)
    return ComputeTerms(
        n_tokens=effective_ubatch(spec, settings),
        n_vocab=spec.n_vocab,
        n_embd=spec.n_embd,
        q_width=n_head * spec.head_dim_k,
        kv_width=n_head_kv * (spec.head_dim_k + spec.head_dim_v),
        ff_dense=ff_dense,
        ff_moe=ff_moe,
        mask_bytes=mask,
        kq_bytes=0 if settings.flash_attn else kq,
        flash_attn=settings.flash_attn,
        n_expert=spec.n_expert if spec.is_moe else 0,
        experts_out=spec.n_expert_used * spec.n_embd if spec.is_moe else 0,
        fixed_bytes=fixed,
        family=model_family(spec),
        n_outputs=min(settings.n_outputs_max, effective_ubatch(spec, settings)),
    )


def _moe_layers(spec: ModelSpec) -> frozenset[int]:
    """Layers with expert tensors (DeepSeek-style models keep a few dense layers in front)."""
    if not spec.is_moe:
        return frozenset()
    out = set()
    for t in spec.tensors:
        if t.name.startswith("blk.") and "_exps." in t.name:
            out.add(int(t.name.split(".", 2)[1]))
    return frozenset(out) or frozenset(range(spec.n_layer))


def model_family(spec: ModelSpec) -> str:
    if spec.is_mla:
        return "mla"
    return "moe" if spec.is_moe else "dense"


def graph_peak_bytes(t: ComputeTerms, fit: dict[str, tuple[float, ...]] | None = None) -> float:
    """Bytes of the heaviest phase (`fit` overrides the family's coefficients, for fitting)."""
    c = fit or FIT[t.family]
    x = t.features()

    def dot(coef: tuple[float, ...]) -> float:
        return sum(a * b for a, b in zip(coef, x, strict=True))

    out = F32 * (t.n_outputs * t.n_vocab + t.n_tokens * c["out"][0] * t.n_embd)
    if t.flash_attn:
        attn = t.n_tokens * (t.mask_bytes + F32 * dot(c["fa"]))
    else:
        attn = t.n_tokens * (t.mask_bytes + t.kq_bytes + F32 * dot(c["attn"])) + t.fixed_bytes
    ffn = t.n_tokens * F32 * dot(c["ffn"])
    return max(out, attn, ffn)


def graph_key(settings: Settings) -> tuple[object, ...]:
    """The settings a measured compute buffer depends on (not -b or threads). Offload moves the
    graph between the host and the devices, so it counts (a CPU plan has -ngl 0 throughout). So
    does which run of layers each device of a split holds, though not the split's exact shares:
    a device's buffer is what its own layers' graph needs, and that changes with them (the first
    layers' experts kept in RAM run on the host, so a device holding only those needs less;
    llama.cpp's allocator reuses a device's activations across its layers, so one layer needs
    less than two): on the qwen3moe fixture over two RPC hosts with --n-cpu-moe 2, 3.01 MiB for
    a host holding layer 0 alone, 3.26 MiB holding layers 0-1. Keyed by the layer counts, a
    measurement serves every split that places the layers alike, and the search settles."""
    s = settings
    return (
        s.n_ctx,
        s.n_ubatch,
        s.n_seq,
        kv_unified(s),
        s.flash_attn,
        s.type_k,
        s.type_v,
        s.swa_full,
        s.n_gpu_layers,
        s.devices,
        s.rpc_servers,
        # Tensors kept in host memory move their matmuls (and activations) to the host's buffer.
        s.n_cpu_moe,
        s.cpu_tensor_patterns,
        s.n_outputs_max,  # logit rows: the verify batch of speculative decoding asks for more
        layers_per_device(s.n_gpu_layers, s.tensor_split) if len(s.tensor_split) > 1 else (),
    )


def formula_graph_bytes(spec: ModelSpec, settings: Settings) -> int:
    """The fitted model's size of the whole graph's compute buffer (what a CPU build reserves)."""
    return round(graph_peak_bytes(compute_terms(spec, settings)))


# Labels in GraphEstimate.measured besides the devices' buffer names: the host-side buffer next
# to offload devices, and the whole graph measured on the CPU (a CPU build, or a plan for devices
# this machine does not have: their graph is the same, only where it lives differs).
HOST = "host"
GRAPH = "graph"


@dataclass(frozen=True)
class GraphEstimate:
    """How a plan sizes the compute buffers.

    The planner searches with the fitted formula. When llama.cpp can read the file, it then asks
    llama.cpp's own allocator (a no_alloc dry run, dry_run/graph.py graph_compute) for the chosen settings:
    its buffers (per device, and the host's) become exact, and the ratio measured/formula of the
    whole corrects every other configuration the search and the alternatives look at, since the
    formula's error on one model changes slowly with the settings.
    """

    scale: float = 1.0
    # graph_key -> buffer label -> bytes: "host" for the CPU's buffer, a device's buffer name else.
    measured: dict[tuple[object, ...], dict[str, int]] = field(
        default_factory=dict, hash=False
    )  # a Plan stays hashable

    # Architectures the cache formula is not verified on (planner/families.py): graph_key ->
    # (KV cache bytes, output buffer bytes) as llama.cpp's dry run counted them, and the ratio of
    # the last count to the formula's KV, which ranks the candidates not counted.
    counted: dict[tuple[object, ...], tuple[int, int]] = field(default_factory=dict, hash=False)
    kv_scale: float = 1.0

    def graph_bytes(self, spec: ModelSpec, settings: Settings) -> int:
        """The whole graph in one buffer (a CPU plan's compute buffer)."""
        exact = self.measured.get(graph_key(settings), {}).get(GRAPH)
        if exact is not None:
            return exact
        return round(formula_graph_bytes(spec, settings) * self.scale)

    def buffer_bytes(self, settings: Settings, label: str) -> int | None:
        return self.measured.get(graph_key(settings), {}).get(label)

    def is_measured(self, settings: Settings) -> bool:
        return graph_key(settings) in self.measured

    def learn(self, settings: Settings, buffers: dict[str, int], formula_bytes: int) -> GraphEstimate:
        """`buffers`: llama.cpp's compute buffers for `settings` by label (GRAPH, or HOST and the
        devices'); `formula_bytes`: the unscaled formula's prediction of the same buffers, whose
        ratio to the measurement corrects the formula for every configuration not measured."""
        scale = sum(buffers.values()) / formula_bytes if formula_bytes > 0 else 1.0
        return replace(self, scale=scale, measured={**self.measured, graph_key(settings): dict(buffers)})

    def record(self, settings: Settings, buffers: dict[str, int]) -> GraphEstimate:
        """Keep llama.cpp's buffers for `settings` as exact, without learning a ratio from them."""
        return replace(self, measured={**self.measured, graph_key(settings): dict(buffers)})

    def is_counted(self, settings: Settings) -> bool:
        """True when llama.cpp counted the cache and output buffer of `settings` (a routed plan)."""
        return graph_key(settings) in self.counted

    def kv_breakdown(self, spec: ModelSpec, settings: Settings) -> KvBreakdown:
        """The formula's cache, or, for a routed architecture, llama.cpp's count of it (the
        formula's per-layer shares kept for the device split; scaled by the last count's ratio
        where these settings were not counted)."""
        kv = kv_cache_bytes(spec, settings)
        count = self.counted.get(graph_key(settings))
        if count is not None:
            # The dry run creates the model's own context only: an MTP draft context's cache (kv.py's
            # "mtp draft", the family's plain cache over the MTP block) comes on top of its count.
            return _with_total(kv, count[0] + (kv.draft.bytes if kv.draft is not None else 0))
        if self.counted and self.kv_scale != 1.0:
            return _with_total(kv, round(kv.total_bytes * self.kv_scale))
        return kv

    def output_bytes(self, spec: ModelSpec, settings: Settings) -> int:
        count = self.counted.get(graph_key(settings))
        return count[1] if count is not None else output_buffer_bytes(spec, settings)

    def count(
        self, spec: ModelSpec, settings: Settings, kv_bytes: int, output_bytes: int, tolerance: int
    ) -> GraphEstimate:
        """Learn llama.cpp's count of the cache and output buffer of `settings` (a dry run's prints,
        each sum within `tolerance`). Where the formula reads the same to the print it is kept,
        being exact to the byte; else llama.cpp's count stands."""
        kv_formula = kv_cache_bytes(spec, settings).total_bytes
        out_formula = output_buffer_bytes(spec, settings)
        kv = kv_formula if abs(kv_formula - kv_bytes) <= tolerance else kv_bytes
        out = out_formula if abs(out_formula - output_bytes) <= tolerance else output_bytes
        scale = kv / kv_formula if kv_formula > 0 else 1.0
        return replace(self, kv_scale=scale, counted={**self.counted, graph_key(settings): (kv, out)})


def _with_total(kv: KvBreakdown, total: int) -> KvBreakdown:
    """`kv` with `total` bytes, shared among its layers as the formula shares them (evenly when the
    formula has none), so that the device split still follows the layers."""
    n = len(kv.per_layer_bytes)
    if total == kv.total_bytes or n == 0:
        return replace(kv, total_bytes=total)
    base = sum(kv.per_layer_bytes)
    weights = kv.per_layer_bytes if base > 0 else (1,) * n
    per_layer = [total * w // sum(weights) for w in weights]
    per_layer[-1] += total - sum(per_layer)
    ratio = total / kv.total_bytes if kv.total_bytes else 0.0
    return replace(
        kv,
        k_bytes=round(kv.k_bytes * ratio),
        v_bytes=round(kv.v_bytes * ratio),
        base_bytes=round(kv.base_bytes * ratio),
        swa_bytes=round(kv.swa_bytes * ratio),
        recurrent_bytes=round(kv.recurrent_bytes * ratio),
        state_bytes=round(kv.state_bytes * ratio),
        total_bytes=total,
        per_layer_bytes=tuple(per_layer),
        parts=(),
    )


FORMULA = GraphEstimate()
# GGML_SCHED_MAX_COPIES: when llama.cpp pipelines ubatches across devices, the scheduler keeps
# this many copies of every split's inputs so that devices work on different ubatches at once.
SCHED_COPIES = 4


def dry_run_surplus_bytes(spec: ModelSpec, settings: Settings) -> int:
    """What llama.cpp's no_alloc dry run (and so its own --fit) reserves on each pipelined device
    after the first beyond what the real reservation takes: the previous device's activations,
    once per copy. Measured with two RPC devices on loopback (tests/server/test_rpc.py holds the
    corrected number against llama-server's real buffers). Only a device holding a repeating
    layer receives a whole ubatch's activations: one holding the output layer alone receives the
    last layer's output rows (n_outputs), and its buffer is the same in both (0.01 MiB on the
    qwen3moe fixture, dry and real), so nothing is taken off it."""
    return SCHED_COPIES * effective_ubatch(spec, settings) * spec.n_embd * F32


def compute_buffer_bytes(
    spec: ModelSpec,
    settings: Settings,
    device: str = "cpu",
    graph: GraphEstimate = FORMULA,
    *,
    pipelined: bool = False,
    label: str | None = None,
) -> int:
    """Predicted `compute buffer size` llama.cpp reports for `device`.

    "cpu":  the CPU build: the whole graph in one CPU compute buffer (measured, see module doc).
    "gpu":  the compute buffer of a device holding layers (`label`: its buffer name). The same
            graph model, measured against llama.cpp on RPC devices on loopback (another backend
            with its own buffers, as a GPU has): within 0-15% above for one device. Pipelined
            (`pipelined`: every layer on several async devices, no tensor kept in host memory;
            breakdown.memory_breakdown decides), each split's inputs are kept
            SCHED_COPIES times (the masks and the hidden state).
    "host": the host-side buffer next to the devices. The token-embedding lookup always runs on
            the CPU (llama-model.cpp keeps the input layer there) and the graph inputs are
            created on the host, so with every layer offloaded it holds the embeddings and their
            copy for the first device (`n_embd` f32 per token, twice), token ids, positions, the
            KV row indices and the KQ masks (measured on RPC devices: exact to a few KiB). When
            layers stay on the CPU (`n_gpu_layers <= n_layer`: -ngl counts the output layer first)
            their activations live here too, so the full graph model applies.
    Sizes llama.cpp measured for these settings (`graph`, an exact plan's) replace the formula.
    """
    if device == "cpu":
        return graph.graph_bytes(spec, settings)
    measured = graph.buffer_bytes(settings, HOST if device == "host" else (label or "gpu"))
    if measured is not None:
        return measured
    t = compute_terms(spec, settings)
    hidden = t.n_embd * F32
    copies = (SCHED_COPIES - 1) * t.n_tokens * (t.mask_bytes + 2 * hidden) if pipelined else 0
    if device == "gpu":
        # Weights a CPU override keeps in host memory are copied in for the ubatch's matmuls.
        held = offload_copy_bytes(spec, settings, t.n_tokens)
        return graph.graph_bytes(spec, settings) + round(copies * graph.scale) + held
    if device == "host":
        n_main = spec.n_layer - spec.n_layer_nextn
        v_rows = 1 if settings.flash_attn else max(spec.n_head_kv, default=0) * spec.head_dim_v
        inputs = 2 * hidden + 4 + 4 + t.mask_bytes + 8 + 8 * max(v_rows, 1)
        host = t.n_tokens * inputs + copies
        # Layers left on the CPU, or host-held experts of offloaded layers run by the CPU (a ubatch
        # below the size at which the device takes their matmuls over): their activations live here.
        cpu_runs_experts = t.n_tokens < OP_OFFLOAD_MIN_BATCH and largest_held_offloaded_bytes(spec, settings) > 0
        if settings.n_gpu_layers <= n_main or cpu_runs_experts:
            host = max(host, graph.graph_bytes(spec, settings))
        return host
    raise ValueError(f"unknown device {device!r} (use 'cpu', 'gpu' or 'host')")


def output_buffer_bytes(spec: ModelSpec, settings: Settings) -> int:
    """The logits buffer llama.cpp allocates at context creation: `n_vocab` f32 per sequence.

    llama_context::output_reserve(n_seq_max) (llama-context.cpp) sizes it for one output row per
    sequence; it grows later only if a batch asks for more rows (logits_all, embeddings).
    """
    return spec.n_vocab * F32 * max(1, settings.n_seq)
