"""The GPU speed model against real cards' published llama-bench results.

    .venv/bin/python bench/published_speed.py            # predicted / published per card and test
    .venv/bin/python bench/published_speed.py --markdown # the same as the table in docs/speed-model.md
    .venv/bin/python bench/published_speed.py --today    # every row at today's rates (no era factors)
    .venv/bin/python bench/published_speed.py --fit      # derive the model's constants from the fitted rows

No GPU here has ever run the speed model's GPU side, so its figures are held against the llama-bench
results people published for real cards (bench/data/published_llama_bench.csv: one row per card x
model x test, each with its source, build and date; every number in it was read at its source).
For each row the model file is written as a sparse GGUF at the published model's dimensions
(testkit: the header and tensor table, the data a hole, as bench/planner.py's MoE table does), the
card's GPU profile (profiles/gpus.json) is the target, and the plan's speed model prices the test
llama-bench ran: `ppN` reads an N-token prompt into an empty cache (ubatch 512), `tgN` generates N
tokens from an empty cache (the mean step is the one at depth N/2), every layer on the GPU, flash
attention as the row says (off unless the source ran `-fa 1`), under the row's backend.

The rows are split by card, fixed in testkit/published.py and not chosen by their errors: the
HELD_BACK cards were kept out of every constant the GPU model takes from these data (`--fit`;
docs/speed-model.md, "GPU speed against published results"), and are reported apart. Rows of
older builds are multiplied by their era's factor (ERA_FACTORS below). Goal: decode within +-15% and prompt within +-25% on at least 80% of the
held-back cards. Rows the source itself marks as outliers are listed but not scored.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from testkit.gguf_models import write_shape_header_only  # noqa: E402
from testkit.published import (  # noqa: E402
    DATA,
    DECODE_GOAL,
    PROMPT_GOAL,
    SHAPES,
    PublishedRow,
    load_published,
)

# The model prices today's llama.cpp: its constants come from the most recent rows (2025-H2, whose
# factor is 1). Older builds ran at other speeds as a whole (CUDA's quantized prompt products moved
# to int8 tensor cores in mid-2024, llama.cpp PR #7676: an RTX 4090's 8B Q4_0 pp512 went from 7776
# to 10359 tokens/s), so a row's prediction is multiplied by its era's factor for its backend: one
# per era and kind (decode, prompt), the median published / predicted over that era's and
# backend's fitted cards, and only where at least two fitted cards share them (`--fit` derives
# them; docs/speed-model.md). Eras and backends with fewer are priced at today's rates, and the
# table says so.
CURRENT_ERA = "2025-H2"
ERA_FACTORS: dict[tuple[str, str], tuple[float, float]] = {
    ("2024-H1", "CUDA"): (0.85, 0.70),
    ("2024-H2", "CUDA"): (0.92, 1.17),
}


def era_factor(row: PublishedRow) -> float:
    decode, prompt = ERA_FACTORS.get((row.era, row.backend), (1.0, 1.0))
    return decode if row.kind == "decode" else prompt


@dataclass(frozen=True)
class Scored:
    row: PublishedRow
    predicted: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.row.tokens_per_s

    @property
    def within_goal(self) -> bool:
        goal = DECODE_GOAL if self.row.kind == "decode" else PROMPT_GOAL
        return abs(self.ratio - 1.0) <= goal


@dataclass(frozen=True)
class Case:
    """A row with what pricing it needs: the model file's spec, the card's target, the settings."""

    row: PublishedRow
    spec: Any
    target: Any
    settings: Any
    mem: Any


def prepare(rows: list[PublishedRow], folder: Path) -> list[Case]:
    """Each row's model written as a sparse file at its dimensions and planned on its card's profile."""
    from testkit.machines import cpu_machine
    from vrampilot.gguf import load_model_spec
    from vrampilot.hardware import find_profile
    from vrampilot.planner.memory.breakdown import memory_breakdown
    from vrampilot.planner.settings import Settings
    from vrampilot.planner.target import TargetRequest, resolve_target

    machine = cpu_machine(ram_gib=64)
    specs: dict[tuple[str, str], Any] = {}
    cases: list[Case] = []
    for row in rows:
        key = (row.model, row.quant)
        if key not in specs:
            path = write_shape_header_only(
                folder / f"{row.model}-{row.quant}.gguf", SHAPES[row.model], recipe=row.quant
            )
            specs[key] = load_model_spec(path)
        spec = specs[key]
        target = resolve_target(TargetRequest(profile=find_profile(row.profile)), machine)
        # The row's backend names the device as llama.cpp does ("ROCm0").
        target = replace(target, gpus=tuple(replace(g, llama_name=f"{row.backend}0") for g in target.gpus))
        settings = Settings(
            n_ctx=max(1024, row.n_tokens * 2),
            n_gpu_layers=spec.n_layer + 1,
            n_batch=2048,
            n_ubatch=512,
            flash_attn=row.flash_attn,
        )
        cases.append(Case(row, spec, target, settings, memory_breakdown(spec, settings, target)))
    return cases


def price(case: Case) -> float:
    """The row's test priced by the planner's speed model, before its era's factor: `ppN` reads N
    tokens into an empty cache, `tgN` generates N (the mean step is the one at depth N/2)."""
    from vrampilot.planner.speed_model.predict import SpeedModel

    row = case.row
    model = SpeedModel(case.spec, case.settings, case.target, case.mem)
    if row.kind == "prompt":
        return row.n_tokens / model.prefill_seconds(row.n_tokens, 0)
    return 1.0 / model.decode_seconds(max(1, row.n_tokens // 2))


def predict(rows: list[PublishedRow], folder: Path, eras: bool = True) -> list[Scored]:
    """Each row priced on its card's profile, times its build era's factor (ERA_FACTORS) unless
    `eras` is off (every row at today's rates)."""
    return [Scored(c.row, price(c) * (era_factor(c.row) if eras else 1.0)) for c in prepare(rows, folder)]


def _era_label(row: PublishedRow, eras: bool) -> str:
    if row.era == CURRENT_ERA or not eras:
        return "1 (today's rates)"
    if (row.era, row.backend) in ERA_FACTORS:
        return f"x{era_factor(row):.2f}"
    return "none: today's rates"


def _summary(scored: list[Scored], label: str) -> list[str]:
    lines = []
    for kind, goal in (("decode", DECODE_GOAL), ("prompt", PROMPT_GOAL)):
        part = [s for s in scored if s.row.kind == kind and not s.row.outlier]
        if not part:
            continue
        ratios = [s.ratio for s in part]
        within = sum(s.within_goal for s in part)
        log_err = statistics.fmean(abs(math.log(r)) for r in ratios)
        lines.append(
            f"{label} {kind}: {within} of {len(part)} rows within +-{goal:.0%}, "
            f"ratio {min(ratios):.2f}-{max(ratios):.2f}, mean |log error| {log_err:.3f}"
        )
    cards = sorted({s.row.card for s in scored})
    good = [c for c in cards if all(s.within_goal for s in scored if s.row.card == c and not s.row.outlier)]
    lines.append(f"{label} cards with every test within its goal: {len(good)} of {len(cards)}")
    return lines


def report(scored: list[Scored], markdown: bool = False, eras: bool = True) -> str:
    lines: list[str] = []
    for label, held in (("fitted", False), ("held-back", True)):
        part = [s for s in scored if s.row.held_back == held]
        if markdown:
            lines.append(f"\n**{label.capitalize()} rows**\n")
            lines.append(
                "| card | backend | model | test | published tok/s | predicted | ratio | build, date | era factor |"
            )
            lines.append("| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: |")
        else:
            lines.append(f"\n== {label} rows ==")
        for s in part:
            r = s.row
            flag = " (outlier, not scored)" if r.outlier else ("" if s.within_goal else " *")
            model = f"{r.model} {r.quant}"
            era = _era_label(r, eras)
            if markdown:
                lines.append(
                    f"| {r.card} | {r.backend} | {model} | {r.test} | {r.tokens_per_s:,.1f} | "
                    f"{s.predicted:,.1f} | {s.ratio:.2f}{flag} | {r.build}, {r.date} | {era} |"
                )
            else:
                lines.append(
                    f"{r.card:15} {r.backend:6} {model:21} {r.test:6} published {r.tokens_per_s:9.1f} "
                    f"predicted {s.predicted:9.1f}  ratio {s.ratio:5.2f}{flag}  [{r.era} {era}]"
                )
        lines.append("")
        lines.extend(_summary(part, label))
    return "\n".join(lines)


@contextmanager
def _constants(**values: Any) -> Iterator[None]:
    """The speed model's module constants set to `values` for a while (the fit tries them)."""
    from vrampilot.planner.speed_model import predict as speed

    saved = {k: getattr(speed, k) for k in values}
    for k, v in values.items():
        setattr(speed, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(speed, k, v)


def _needed(cases: list[Case]) -> list[tuple[Case, float]]:
    """Published / predicted (before any era factor): what each row asks the model to be multiplied by."""
    return [(c, c.row.tokens_per_s / price(c)) for c in cases]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 1.0


def fit(cases: list[Case]) -> dict[str, Any]:
    """The GPU model's constants from the fitted rows, in the order docs/speed-model.md gives:
    today's decode share and fixed costs by least squares over the current era's rows; HBM's share
    relative to GDDR's and float weights' factor from the 2024 CUDA runs (ratios within one run);
    the prompt share per generation and the quantized products' share likewise; then one factor
    per older era and backend with at least two fitted cards. Prints what it found."""
    from vrampilot.planner.speed_model import predict as speed

    rows = [c for c in cases if not c.row.held_back and not c.row.outlier]
    now = [c for c in rows if c.row.era == CURRENT_ERA and c.row.kind == "decode"]
    best: tuple[float, dict[str, Any]] = (math.inf, {})
    for share in [x / 100 for x in range(70, 100)]:
        for layer_us in range(0, 42, 2):
            for token_us in range(0, 900, 100):
                trial = {
                    "GPU_BANDWIDTH_EFFICIENCY": share,
                    "GPU_LAYER_OVERHEAD_S": layer_us * 1e-6,
                    "GPU_TOKEN_OVERHEAD_S": token_us * 1e-6,
                }
                with _constants(**trial):
                    err = sum(math.log(x) ** 2 for _, x in _needed(now))
                if err < best[0]:
                    best = (err, trial)
    found: dict[str, Any] = dict(best[1])
    with _constants(**found, MEMORY_KIND_SHARE={}, FLOAT_DECODE_SHARE=1.0):
        old = [c for c in rows if c.row.era == "2024-H1" and c.row.backend == "CUDA"]
        need = _needed([c for c in old if c.row.kind == "decode"])
        quant = {c.row.card: x for c, x in need if c.row.quant != "F16" and c.target.gpus[0].memory_kind == "gddr"}
        flt = {c.row.card: x for c, x in need if c.row.quant == "F16" and c.target.gpus[0].memory_kind == "gddr"}
        hbm = [x for c, x in need if c.row.quant != "F16" and c.target.gpus[0].memory_kind == "hbm"]
        found["MEMORY_KIND_SHARE"] = {"hbm": round(_median(hbm) / _median(list(quant.values())), 2)}
        found["FLOAT_DECODE_SHARE"] = round(_median([flt[k] / quant[k] for k in flt if k in quant]), 2)
    with _constants(**found, PROMPT_SHARE_BY_GENERATION={}, QUANTIZED_PROMPT_SHARE=1.0):
        need = _needed([c for c in old if c.row.kind == "prompt"])
        quant = {c.row.card: x for c, x in need if c.row.quant != "F16"}
        flt = {c.row.card: x for c, x in need if c.row.quant == "F16"}
        found["QUANTIZED_PROMPT_SHARE"] = round(1.0 / _median([flt[k] / quant[k] for k in flt if k in quant]), 2)
    with _constants(**found, PROMPT_SHARE_BY_GENERATION={}):
        by_gen: dict[str, list[float]] = {}
        for c, x in _needed([c for c in old if c.row.kind == "prompt"]):
            by_gen.setdefault(c.target.gpus[0].generation, []).append(x)
        today = _needed([c for c in rows if c.row.era == CURRENT_ERA and c.row.kind == "prompt"])
        ada = _median([x for c, x in today if c.target.gpus[0].generation == "ada"])
        found["PROMPT_SHARE_BY_GENERATION"] = {
            "ampere": round(ada * _median(by_gen["ampere"]) / _median(by_gen["ada"]), 2),
            "ada": round(ada, 2),
        }
    eras: dict[tuple[str, str], tuple[float, float]] = {}
    with _constants(**found):
        for era, backend in sorted({(c.row.era, c.row.backend) for c in rows if c.row.era != CURRENT_ERA}):
            part = [c for c in rows if (c.row.era, c.row.backend) == (era, backend)]
            if len({c.row.card for c in part}) < 2:
                continue
            factor = [_median([x for c, x in _needed(part) if c.row.kind == k]) for k in ("decode", "prompt")]
            eras[(era, backend)] = (round(factor[0], 2), round(factor[1], 2))
    for name, value in found.items():
        print(f"{name} = {value!r}  (in the code: {getattr(speed, name)!r})")
    print(f"ERA_FACTORS = {eras!r}  (in this file: {ERA_FACTORS!r})")
    return {**found, "ERA_FACTORS": eras}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--today", action="store_true", help="price every row at today's rates (no era factors)")
    parser.add_argument("--fit", action="store_true", help="derive the constants from the fitted rows and print them")
    args = parser.parse_args(argv)
    rows = load_published(args.data)
    with tempfile.TemporaryDirectory(prefix="vrampilot-published-") as tmp:
        if args.fit:
            fit(prepare(rows, Path(tmp)))
            return 0
        scored = predict(rows, Path(tmp), eras=not args.today)
    print(f"{len(rows)} published rows, {len({r.card for r in rows})} cards, {len({r.source for r in rows})} sources")
    print(report(scored, args.markdown, eras=not args.today))
    return 0


if __name__ == "__main__":
    sys.exit(main())
