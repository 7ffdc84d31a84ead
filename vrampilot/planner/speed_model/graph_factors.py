"""What a whole graph costs beyond its kernels, from the probe's run of the built-in model.

The speed probe times each kernel alone, on the shapes it runs best at; a real model's steps cost
more (threads wait for each other at every node, attention over a growing cache, small products in
a chain). So the probe also runs the built-in model for real (speed/reference_run.py), and here
the speed model predicts those very steps from the kernels' rates alone; measured over predicted
gives `GraphFactors`, which every later prediction on this machine applies (planner/speed_model/cpu_speed.py).
Two decode steps per thread count, near the start of the cache and deep into it, separate the two
parts of a step: with b the predicted weights and fixed costs, a(n) the predicted attention over n
cells,

    measured(n) = f_base * b + f_attention * a(n)

gives f_attention from the difference of the two depths and f_base from the shallow one; the
prompt's four ubatches (after 0 to 1536 cells) give both for reading prompts, and the first ubatch
read again at each smaller thread count gives that count's own f_base.

Why each rule is as it is (the bounds, `BEST_CASE_MIN`, other models' 1-thread decode weights at
x1 in `factors_for_model`, the built-in model's own weight types always measured by
`with_reference_types`), with the measurements behind it and what was tried instead:
docs/speed-model.md, "Graph factors".
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from vrampilot.gguf import GGUFError, ModelSpec, load_model_spec
from vrampilot.paths import embedded_model_path
from vrampilot.planner.speed_model.cpu_speed import (
    CpuRates,
    GraphFactors,
    WeightTable,
    attention_shapes,
    decode_seconds,
    prefill_seconds,
    weight_table,
)
from vrampilot.speed import HostProbe, RateAt, ReferenceRun

FACTOR_MIN, FACTOR_MAX = 0.5, 3.0
BEST_CASE_MIN = 1.0  # attention's and a prompt's matrices' lower bound (see the module's text)


def _clamp(x: float, lowest: float = FACTOR_MIN) -> float:
    return round(min(FACTOR_MAX, max(lowest, x)), 4)


def _fit(rows: Sequence[tuple[float, float, float]], base_min: float) -> tuple[float, float]:
    """(f_base, f_attention) with measured = f_base * base + f_attention * attention, least squares
    over rows of (measured, base, attention), f_base at least `base_min`, f_attention at least
    BEST_CASE_MIN; f_attention 1 when the rows cannot tell it."""
    sbb = sum(b * b for _, b, _ in rows)
    saa = sum(a * a for _, _, a in rows)
    sab = sum(a * b for _, b, a in rows)
    smb = sum(m * b for m, b, _ in rows)
    sma = sum(m * a for m, _, a in rows)
    det = sbb * saa - sab * sab
    if sbb <= 0:
        return 1.0, 1.0
    # Nearly collinear rows (attention a fixed share of every row) cannot separate the parts.
    if det <= 1e-6 * sbb * saa or saa <= 0:
        return _clamp(sum(m for m, _, _ in rows) / sum(b + a for _, b, a in rows), base_min), 1.0
    f_att = _clamp((sbb * sma - sab * smb) / det, BEST_CASE_MIN)
    return _base_only(rows, f_att, base_min), f_att


def _base_only(rows: Sequence[tuple[float, float, float]], f_att: float, base_min: float) -> float:
    """f_base (at least `base_min`) for rows of (measured, base, attention) with the attention
    factor given."""
    sbb = sum(b * b for _, b, _ in rows)
    return _clamp(sum(b * (m - f_att * a) for m, b, a in rows) / sbb, base_min) if sbb > 0 else 1.0


def factors_for_run(spec: ModelSpec, run: ReferenceRun, raw: CpuRates) -> GraphFactors:
    """The factors one reference run gives, with `raw` the kernels' rates (no graph factors)."""
    table: WeightTable = weight_table(spec)
    everywhere = tuple(True for _ in range(spec.n_layer))
    attention = attention_shapes(spec, lambda il: run.n_ctx)
    nothing = tuple(None for _ in attention)
    kv = run.kv_type
    decode_base: list[RateAt] = []
    decode_att: list[RateAt] = []
    for t in sorted({d.threads for d in run.decode}):
        rows = []
        for d in run.decode:
            if d.threads == t:
                base = decode_seconds(table, everywhere, True, nothing, d.depth, kv, t, raw)
                att = decode_seconds(table, everywhere, True, attention, d.depth, kv, t, raw) - base
                rows.append((d.step_s, base, att))
        fb, fa = _fit(rows, FACTOR_MIN)
        decode_base.append(RateAt(t, fb))
        decode_att.append(RateAt(t, fa))
    by_threads: dict[int, list[tuple[float, float, float]]] = {}
    for p in run.prefill:
        args = (p.n_tokens, p.n_past, run.n_ubatch, run.n_ubatch, kv, p.threads, raw)
        base = prefill_seconds(table, everywhere, True, nothing, *args)
        att = prefill_seconds(table, everywhere, True, attention, *args) - base
        by_threads.setdefault(p.threads, []).append((p.seconds, base, att))
    # The prompt's attention is told from its weights by the ubatches read after 0 to 1536 cells,
    # at the largest thread count; a smaller count's one ubatch gives its weights' factor with that
    # attention factor.
    deepest = max(by_threads, key=lambda t: (len(by_threads[t]), t), default=0)
    att_factor = _fit(by_threads[deepest], BEST_CASE_MIN)[1] if by_threads else 1.0
    prefill_base: list[RateAt] = []
    prefill_att: list[RateAt] = []
    for t, rows in sorted(by_threads.items()):
        if len(rows) > 1:
            fb, fa = _fit(rows, BEST_CASE_MIN)
        else:
            fb, fa = _base_only(rows, att_factor, BEST_CASE_MIN), att_factor
        prefill_base.append(RateAt(t, fb))
        prefill_att.append(RateAt(t, fa))
    return GraphFactors(tuple(decode_base), tuple(decode_att), tuple(prefill_base), tuple(prefill_att))


def factors_for_model(spec: ModelSpec, probe: HostProbe | None, physical_cores: int) -> GraphFactors | None:
    """The factors a prediction for `spec` uses on this machine: the run's own for the built-in
    model, and for any other the same with a 1-thread decode step's weights at x1 (see the module's
    text). None as `graph_factors`."""
    graph = graph_factors(probe, physical_cores)
    run = probe.reference if probe is not None else None
    if graph is None or run is None or (spec.path.name, spec.file_bytes) == (run.model_name, run.model_bytes):
        return graph
    base = tuple(RateAt(r.threads, 1.0) if r.threads == 1 else r for r in graph.decode_base)
    return replace(graph, decode_base=base)


@functools.lru_cache(maxsize=1)
def _reference_spec() -> ModelSpec | None:
    path = embedded_model_path()
    try:
        return load_model_spec(path) if path is not None else None
    except (OSError, GGUFError):
        return None


def with_reference_types(types: Sequence[str]) -> list[str]:
    """`types` and the built-in model's weight types, which the graph factors are priced with: what
    a probe (or the kernels added for a model) measures."""
    spec = _reference_spec()
    extra = weight_table(spec).types() if spec is not None else ()
    return list(dict.fromkeys([*(t.lower() for t in types), *extra]))


@functools.lru_cache(maxsize=8)
def graph_factors(probe: HostProbe | None, physical_cores: int) -> GraphFactors | None:
    """This machine's factors, or None without a reference run (an older record, no built-in model,
    or another file than the one measured)."""
    if probe is None or probe.reference is None:
        return None
    run = probe.reference
    path = embedded_model_path()
    try:
        if path is None or path.name != run.model_name or path.stat().st_size != run.model_bytes:
            return None
    except OSError:
        return None
    spec = _reference_spec()
    if spec is None:
        return None
    raw = CpuRates(probe, physical_cores)
    if raw.stand_ins(weight_table(spec).types()):
        return None  # a stand-in's error would be taken for the graph's cost (see the module's text)
    return factors_for_run(spec, run, raw)
