"""What this machine measured: the speed probe's figures and what replies taught, as frozen data.

The planner predicts speed from these instead of assumed constants, and says where each figure
came from (measured, with the probe's date, or assumed). Two kinds of knowledge, kept together because
both belong to one machine and go stale together when its hardware changes:

- `HostProbe`: llama.cpp's own kernels timed once on this CPU (`speed/host_probe.py`): weight bytes
  per second through the mat-vec kernel of each weight type (decoding), matrix throughput of the
  same kernels on a prompt-sized batch (reading prompts), flash attention per KV cache type, the
  fixed cost of one graph node, the RAM read bandwidth, and the built-in model's real steps
  (`ReferenceRun`: what a whole graph costs beyond its kernels).
- `SpeedFactors`: per backend (and per model), measured / predicted speed of recent replies. What
  a prediction makes of them (their median, weighed against the probe, bounded) is the planner's
  (planner/learned_factors.py).

Units live in the names; rates are kept per thread count (`RateAt`) because llama.cpp's kernels do
not scale alike: decoding saturates memory with few threads, prompts keep scaling.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field, replace

from vrampilot.speed.codec import meta
from vrampilot.speed.cpu_load import BUSY_SHARE
from vrampilot.speed.probe_model import N_EMBD as _PROBE_MODEL_EMBD

PROBE_MODEL_ROW_BYTES = 2 * _PROBE_MODEL_EMBD  # one f16 row of the tiny model's output matrix

# Replies remembered per backend and kind (the planner's factor is their median).
FACTOR_WINDOW = 9
# One reply's measured / predicted beyond these is an accident (a suspended laptop, a swap storm).
RATIO_MIN, RATIO_MAX = 0.2, 5.0
LAST_REPLIES_KEPT = 16
MODEL_FACTORS_KEPT = 16  # models with their own factors, per machine (the most recently used)
# The pace gauge (speed/pace.py): a reply read when the gauge took more than its usual time
# divided by SLOW_PACE is not learned from; "usual" is the median of the probe's reading and the
# last PACE_WINDOW replies' at the same thread count. Method and error ranges: docs/speed-model.md,
# decision log, "The pace gauge".
SLOW_PACE = 0.85
PACE_WINDOW = 15
PACES_KEPT = 32
# The probe reads the same gauge at its end. Once replies have read it this many times at a thread
# count, a probe whose reading was slower than their median / SLOW_PACE ran at a slow moment, and
# its figures with it: the app measures again at its next start (docs/speed-model.md, decision
# log, "The pace gauge").
PROBE_PACE_READINGS = 3


@dataclass(frozen=True)
class RateAt:
    """A rate measured with `threads` threads."""

    threads: int
    value: float = field(metadata=meta(digits=4))


def rate_at(rates: tuple[RateAt, ...], threads: int) -> float:
    """The rate at `threads`, interpolated linearly between the thread counts measured.

    Beyond the largest count measured (hyper-threads, usually) the rate stays where it was: more
    threads than physical cores add nothing to llama.cpp's kernels.
    """
    if not rates:
        return 0.0
    pts = sorted(rates, key=lambda r: r.threads)
    if threads <= pts[0].threads:
        return pts[0].value
    for lo, hi in itertools.pairwise(pts):
        if threads <= hi.threads:
            share = (threads - lo.threads) / (hi.threads - lo.threads)
            return lo.value + (hi.value - lo.value) * share
    return pts[-1].value


# The row lengths the mat-vec rates are measured at: short rows (a small model's n_embd) cost
# more per byte on some types (per-row reductions), where repacked types keep their rate; a
# model's rows are priced between the lengths measured, since a small model's rows priced at a
# longer row's rate made its steps look slower than their kernels, a factor then charged to every
# model. Measurements: docs/speed-model.md, decision log, "Row length and chains of small products".
SHORTEST_ROW = 512
SHORT_ROW = 1024
LONG_ROW = 4096
# The matrices of the chain the per-product cost is measured with (rows of SHORT_ROW): 147 KB in
# Q4_0, the size of a small model's K and V projections.
CHAIN_MATRIX_ROWS = 256


@dataclass(frozen=True)
class KernelRates:
    """One weight type through llama.cpp's matrix kernels on this CPU."""

    type_name: str = field(metadata=meta(key="type"))  # ggml's name, lower case: "q4_k", "q8_0", "f16"
    buffer: str  # where llama.cpp keeps such weights: "CPU", or "CPU_REPACK" (repacked for x86 kernels)
    decode_gbps: tuple[RateAt, ...]  # mat-vec over rows of LONG_ROW, weights in RAM: weight bytes per second
    decode_short_gbps: tuple[RateAt, ...]  # the same over rows of SHORT_ROW
    prefill_gflops: tuple[RateAt, ...]  # mat-mat over a prompt-sized batch
    prefill_moe_gflops: tuple[RateAt, ...] = ()  # the same through the mixture-of-experts product
    decode_shortest_gbps: tuple[RateAt, ...] = ()  # mat-vec over rows of SHORTEST_ROW (empty: not measured)
    # What one mat-vec of a decode step's chain costs beyond its bytes at the SHORT_ROW rate,
    # microseconds (ggml/CpuKernels.mul_vec_chain; empty: not measured).
    matvec_overhead_us: tuple[RateAt, ...] = ()


@dataclass(frozen=True)
class AttentionRates:
    """Flash attention over a cache of one KV type with heads of `head_dim`: FLOPs per second
    (2 per multiply-add, for Q.K and for the V sum). Measured at two head sizes, since the per-cell
    cost does not grow with the head size alone."""

    kv_type: str  # "f16", "q8_0", "q4_0"
    head_dim: int
    decode_gflops: tuple[RateAt, ...]  # one query over a long cache held in the CPU's caches
    prefill_gflops: tuple[RateAt, ...]  # a batch of queries
    decode_ram_gflops: tuple[RateAt, ...] = ()  # one query over a cache too large for them (f16 only)


@dataclass(frozen=True)
class ElementwiseRates:
    """One elementwise step a layer takes per token (llamacpp/ggml.py `CpuKernels.elementwise`):
    nanoseconds per f32 element. A prompt's ubatch runs each over all its tokens; with fast
    matrix kernels they weigh as much as a graph factor carries (docs/speed-model.md, decision log,
    "Elementwise steps")."""

    op: str  # "norm", "swiglu", "geglu", "rope"
    ns_per_element: tuple[RateAt, ...]


@dataclass(frozen=True)
class StepTiming:
    """One decode step of the probe's tiny Llama model (speed/probe_model.py), as the engine
    runs it (llama.cpp's decode, then the sampler chain): its weights cost next to nothing, so this
    is the fixed cost of a step with `n_layer` blocks and `n_vocab` logits to sample from."""

    n_layer: int
    n_vocab: int
    step_us: tuple[RateAt, ...]


@dataclass(frozen=True)
class FixedCosts:
    """What a decode step costs besides weights and attention, from the tiny model's steps."""

    step_s: float  # once per step: llama.cpp's decode call, inputs, the engine's loop
    layer_s: float  # per Llama block (about 19 working graph nodes, each ending in a barrier)
    vocab_entry_s: float  # per logit: copying it out and the sampler chain over it


@dataclass(frozen=True)
class ReferenceDecode:
    """Decode steps of the reference model with `threads`: the median step with `depth` tokens in
    the cache (the mean over the steps timed)."""

    threads: int
    depth: int
    step_s: float = field(metadata=meta(digits=7))


@dataclass(frozen=True)
class ReferencePrefill:
    """One ubatch of the reference model's prompt: n_tokens read after n_past, in `seconds`."""

    threads: int
    n_past: int
    n_tokens: int
    seconds: float = field(metadata=meta(digits=6))


@dataclass(frozen=True)
class ReferenceRun:
    """The built-in model run for real by the probe (speed/reference_run.py): decode steps near
    the start of the cache and deep into it at each thread count, and a prompt read ubatch by
    ubatch. The planner predicts the same steps from the kernels' rates; what the graph costs
    beyond them, it learns from the difference (planner/speed_model/graph_factors.py)."""

    model_name: str  # the GGUF file's name
    model_bytes: int  # and its size: another file of that name is another model
    n_ctx: int
    n_ubatch: int
    kv_type: str  # the cache type both K and V used ("f16"), with flash attention
    decode: tuple[ReferenceDecode, ...]
    prefill: tuple[ReferencePrefill, ...]


@dataclass(frozen=True)
class HostProbe:
    """One run of the speed probe on this machine's CPU (see speed/host_probe.py)."""

    measured_at: str  # ISO 8601, UTC
    duration_s: float = field(metadata=meta(digits=3))
    cpu_variant: str | None  # the llama.cpp CPU code that ran the kernels ("haswell")
    ram_read_gbps: tuple[RateAt, ...]
    steps: tuple[StepTiming, ...]  # the tiny model: few and many layers, small and large vocabulary
    kernels: tuple[KernelRates, ...]
    attention: tuple[AttentionRates, ...]
    # Other programs' share of all cores while the probe ran (speed/cpu_load.py): above
    # BUSY_SHARE the figures may be low, and the plan says "measured while busy" (see probe_outdated).
    others_cpu_share: float = field(default=0.0, metadata=meta(digits=3))
    # The app itself ran llama.cpp meanwhile (a reply): other programs' share does not see that.
    app_busy: bool = False
    # The built-in model run for real (None: a record from before the probe did, or no model).
    reference: ReferenceRun | None = None
    # The pace gauge (speed/pace.py) read at the probe's end, milliseconds per thread count: the
    # first readings a reply's pace is compared with.
    pace_ms: tuple[RateAt, ...] = ()
    # Elementwise steps per token (None: a record from before the probe timed them).
    elementwise: tuple[ElementwiseRates, ...] | None = None

    @property
    def busy(self) -> bool:
        return self.app_busy or self.others_cpu_share > BUSY_SHARE

    def busy_cause(self) -> str:
        return (
            "a reply ran meanwhile" if self.app_busy else f"other programs used {self.others_cpu_share:.0%} of the CPU"
        )

    def busy_note(self) -> str:
        """What a busy probe's figures are, in one phrase ("" for a quiet one): the plan's basis,
        `doctor` and the window all say it this way."""
        if not self.busy:
            return ""
        return f"measured while busy ({self.busy_cause()}), so its figures may be low; replies correct them"

    def with_kernels(self, added: tuple[KernelRates, ...]) -> HostProbe:
        names = {k.type_name for k in added}
        return replace(self, kernels=(*(k for k in self.kernels if k.type_name not in names), *added))

    def fixed_costs(self, threads: int) -> FixedCosts:
        """The fixed costs at `threads`, separated from the tiny model's steps: more layers at the
        same vocabulary give the cost per layer; a larger vocabulary at the same depth gives the cost
        per logit, less the larger output matrix it reads (one f16 row per entry, at the measured
        f16 mat-vec rate); what remains of the smallest model is the step's own."""
        by = {(s.n_layer, s.n_vocab): rate_at(s.step_us, threads) * 1e-6 for s in self.steps}
        if len(by) < 3:
            return FixedCosts(0.0, 0.0, 0.0)
        (l0, v0), (l1, _), (_, v1) = min(by), max(by, key=lambda k: k[0]), max(by, key=lambda k: k[1])
        base = by[(l0, v0)]
        layer = max(0.0, (by[(l1, v0)] - base) / (l1 - l0))
        f16 = self.kernel("f16")
        out_rate = rate_at(f16.decode_short_gbps, threads) * 1e9 if f16 is not None else 0.0
        out_read = PROBE_MODEL_ROW_BYTES / out_rate if out_rate else 0.0
        vocab = max(0.0, (by[(l0, v1)] - base) / (v1 - v0) - out_read)
        return FixedCosts(max(0.0, base - l0 * layer - v0 * (vocab + out_read)), layer, vocab)

    @property
    def date(self) -> str:
        return self.measured_at[:10]

    @property
    def ram_peak_gbps(self) -> float:
        """The best RAM read rate measured, at any thread count: the meters' peak."""
        return max((r.value for r in self.ram_read_gbps), default=0.0)

    def kernel(self, type_name: str) -> KernelRates | None:
        t = type_name.lower()
        return next((k for k in self.kernels if k.type_name == t), None)

    def elementwise_for(self, op: str) -> ElementwiseRates | None:
        return next((e for e in self.elementwise or () if e.op == op), None)

    def attention_for(self, kv_type: str) -> tuple[AttentionRates, ...]:
        """The measurements of one KV type, smallest head size first."""
        return tuple(sorted((a for a in self.attention if a.kv_type == kv_type.lower()), key=lambda a: a.head_dim))


@dataclass(frozen=True)
class SpeedFactors:
    """What replies on one backend taught: measured / predicted, most recent last."""

    backend: str  # "cpu:haswell", "gpu:NVIDIA GeForce RTX 4090", ...
    decode_ratios: tuple[float, ...] = ()
    prefill_ratios: tuple[float, ...] = ()
    updated_at: str = ""
    model: str = ""  # the GGUF file's name: replies of that model alone ("": of every model)

    @property
    def n_replies(self) -> int:
        return max(len(self.decode_ratios), len(self.prefill_ratios))

    def learn(self, *, decode_ratio: float | None, prefill_ratio: float | None, at: str) -> SpeedFactors:
        """These factors with one more reply's ratios (None: that part was too short to judge).

        Ratios beyond RATIO_MIN..RATIO_MAX are dropped; the window keeps the last FACTOR_WINDOW, whose
        median the planner takes, so a reply slowed by another program is outvoted.
        """

        def add(ratios: tuple[float, ...], r: float | None) -> tuple[float, ...]:
            if r is None or not (RATIO_MIN <= r <= RATIO_MAX):
                return ratios
            return (*ratios, round(r, 4))[-FACTOR_WINDOW:]

        return replace(
            self,
            decode_ratios=add(self.decode_ratios, decode_ratio),
            prefill_ratios=add(self.prefill_ratios, prefill_ratio),
            updated_at=at,
        )


@dataclass(frozen=True)
class LastReply:
    """The last measured reply of one model on one backend, for "predicted X, last measured Y"."""

    model: str  # the GGUF file's name, with its placement when split (planner/speed_model/predict.py calibration_model)
    backend: str
    at: str
    decode_tps: float = field(metadata=meta(digits=2))
    predicted_decode_tps: float = field(metadata=meta(digits=2))  # for that reply's context, before its own correction
    prefill_tps: float = field(metadata=meta(digits=2))
    predicted_prefill_tps: float = field(metadata=meta(digits=2))
    prompt_tokens: int  # evaluated this turn
    context_tokens: int  # in the cache when generation started
    # The machine's pace during it against its usual (MachineSpeed.pace_share; None: not read).
    pace_share: float | None = field(default=None, metadata=meta(digits=2))
    set_aside: str = ""  # why it was not learned from ("": it was), planner/calibration.py


@dataclass(frozen=True)
class PaceReading:
    """The pace gauge read right after a reply at `threads` threads."""

    threads: int
    pace_ms: float


@dataclass(frozen=True)
class DeviceRates:
    """llama.cpp's kernels on one offload device (speed/device_probe.py): what the speed model
    uses for that device instead of its peak bandwidth times an assumed share."""

    llama_name: str  # "Vulkan0"
    description: str  # the device's name, as llama.cpp lists it
    measured_at: str  # ISO 8601, UTC
    weight_type: str  # the type timed ("q8_0")
    decode_gbps: float  # a mat-vec over a matrix larger than the device's caches: weight bytes per second
    prefill_gflops: float  # a prompt-sized product: FLOPs per second
    product_overhead_us: float  # each product of a chain of small ones, beyond its bytes at decode_gbps

    @property
    def date(self) -> str:
        return self.measured_at[:10]


@dataclass(frozen=True)
class MachineSpeed:
    """Everything measured about this machine's speed, for the machine `fingerprint` names."""

    fingerprint: str
    probe: HostProbe | None = None
    factors: tuple[SpeedFactors, ...] = ()
    last_replies: tuple[LastReply, ...] = field(default=())
    paces: tuple[PaceReading, ...] = ()  # the pace gauge after recent replies, oldest first
    devices: tuple[DeviceRates, ...] = ()  # the offload devices' kernels, measured

    def device(self, llama_name: str, description: str) -> DeviceRates | None:
        """The measurement of this device (by llama.cpp's name and the device's own: a card
        swapped into the same slot is another device)."""
        return next((d for d in self.devices if (d.llama_name, d.description) == (llama_name, description)), None)

    def usual_pace_ms(self, threads: int) -> float | None:
        """The gauge's usual time at `threads` (None: never read at that count)."""
        readings = [r.pace_ms for r in self.paces if r.threads == threads][-PACE_WINDOW:]
        if self.probe is not None:
            readings += [r.value for r in self.probe.pace_ms if r.threads == threads]
        return statistics.median(readings) if readings else None

    def pace_share(self, threads: int, pace_ms: float) -> float | None:
        """How fast the machine ran at a reading of `pace_ms`, against its usual (1.0: as usual,
        0.7: it took 1/0.7 of the usual time); None with nothing to compare with."""
        usual = self.usual_pace_ms(threads)
        return usual / pace_ms if usual is not None and pace_ms > 0 else None

    def probe_pace_share(self) -> float | None:
        """How fast the machine ran when the probe read the pace gauge, against the replies' usual
        since: the slowest of its thread counts (None until replies read it PROBE_PACE_READINGS
        times at one of them)."""
        if self.probe is None:
            return None
        shares = []
        for r in self.probe.pace_ms:
            readings = [p.pace_ms for p in self.paces if p.threads == r.threads][-PACE_WINDOW:]
            if len(readings) >= PROBE_PACE_READINGS and r.value > 0:
                shares.append(statistics.median(readings) / r.value)
        return min(shares) if shares else None

    @property
    def probe_read_slow(self) -> bool:
        """The probe ran at a slow moment (`probe_pace_share` under SLOW_PACE): measure again."""
        share = self.probe_pace_share()
        return share is not None and share < SLOW_PACE

    def with_pace(self, threads: int, pace_ms: float) -> MachineSpeed:
        return replace(self, paces=(*self.paces, PaceReading(threads, round(pace_ms, 4)))[-PACES_KEPT:])

    def factors_for(self, backend: str, model: str = "") -> SpeedFactors:
        """The stored factors of this backend over every model (`model` ""), or of one model."""
        found = next((f for f in self.factors if (f.backend, f.model) == (backend, model)), None)
        return found or SpeedFactors(backend, model=model)

    def last_reply(self, model: str, backend: str) -> LastReply | None:
        return next((r for r in reversed(self.last_replies) if r.model == model and r.backend == backend), None)

    def with_factors(self, factors: SpeedFactors) -> MachineSpeed:
        """These factors stored (most recent last); of the per-model ones, the last MODEL_FACTORS_KEPT."""
        others = [f for f in self.factors if (f.backend, f.model) != (factors.backend, factors.model)]
        kept = (*others, factors)
        per_model = [f for f in kept if f.model]
        drop = {id(f) for f in per_model[: max(0, len(per_model) - MODEL_FACTORS_KEPT)]}
        return replace(self, factors=tuple(f for f in kept if id(f) not in drop))

    def with_last_reply(self, reply: LastReply) -> MachineSpeed:
        kept = tuple(r for r in self.last_replies if (r.model, r.backend) != (reply.model, reply.backend))
        return replace(self, last_replies=(*kept, reply)[-LAST_REPLIES_KEPT:])
