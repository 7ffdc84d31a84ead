"""The GPU speed model against real cards' published llama-bench results.

    .venv/bin/python bench/published_speed.py            # predicted / published per card and test
    .venv/bin/python bench/published_speed.py --markdown # the same as the table in docs/speed-model.md

No GPU here has ever run the speed model's GPU side, so its figures are held against the llama-bench
results people published for real cards (bench/data/published_llama_bench.csv: one row per card x
model x test, each with its source, build and date; every number in it was read at its source).
For each row the model file is written as a sparse GGUF at the published model's dimensions
(testkit: the header and tensor table, the data a hole, as bench/planner.py's MoE table does), the
card's GPU profile (profiles/gpus.json) is the target, and the plan's speed model prices the test
llama-bench ran: `ppN` reads an N-token prompt into an empty cache (ubatch 512), `tgN` generates N
tokens from an empty cache (the mean step is the one at depth N/2), every layer on the GPU, flash
attention as the row says (off unless the source ran `-fa 1`), under the row's backend.

The rows are split by card, fixed here and not chosen by their errors: HELD_BACK cards were kept
out of every constant the GPU model takes from these data (docs/speed-model.md, decision log), and
are reported apart. Goal: decode within +-15% and prompt within +-25% on at least 80% of the
held-back cards. Rows the source itself marks as outliers are listed but not scored.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from testkit.gguf_models import BIG, ArchShape, write_shape_header_only  # noqa: E402

DATA = ROOT / "bench" / "data" / "published_llama_bench.csv"
FIELDS = ("card", "profile", "backend", "model", "quant", "test", "tokens_per_s", "build", "date", "source", "note")
BACKENDS = ("CUDA", "ROCm", "Vulkan")
# Cards kept out of the fit (one of each kind the data has: GDDR6 and GDDR6X Ampere, Ada, HBM
# Hopper, RDNA2 under both ROCm and Vulkan), chosen before the errors were looked at.
HELD_BACK = frozenset({"RTX 3070", "RTX 4080", "RTX A6000", "H100 PCIe", "RX 6700 XT"})
DECODE_GOAL = 0.15
PROMPT_GOAL = 0.25

# The published models' dimensions (their GGUF headers as llama.cpp reports them in the sources:
# llama 7B 6.74 B params, mistral 7B 7.24 B, llama 8B 8.03 B).
SHAPES: dict[str, ArchShape] = {
    "llama-2-7b": ArchShape(
        arch="llama",
        name="Llama-2-7B",
        n_layer=32,
        n_embd=4096,
        n_head=32,
        n_head_kv=32,
        n_ff=11008,
        n_vocab=32000,
        n_ctx_train=4096,
        tied=False,
    ),
    "mistral-7b": ArchShape(
        arch="llama",
        name="Mistral-7B-Instruct-v0.2",
        n_layer=32,
        n_embd=4096,
        n_head=32,
        n_head_kv=8,
        n_ff=14336,
        n_vocab=32000,
        n_ctx_train=32768,
        rope_freq_base=1e6,
        tied=False,
    ),
    "llama-3-8b": replace(BIG["llama-3.1-8b"], name="Meta-Llama-3-8B"),
}


@dataclass(frozen=True)
class PublishedRow:
    card: str
    profile: str  # the GPU profile's name in profiles/gpus.json
    backend: str  # CUDA, ROCm or Vulkan
    model: str  # a key of SHAPES
    quant: str  # a testkit recipe: Q4_0, Q4_K_M, F16
    test: str  # pp512, tg128, tg512
    tokens_per_s: float
    build: str
    date: str
    source: str  # the URL the number was read at
    note: str

    @property
    def kind(self) -> str:
        return "prompt" if self.test.startswith("pp") else "decode"

    @property
    def n_tokens(self) -> int:
        return int(self.test[2:])

    @property
    def flash_attn(self) -> bool:
        return "-fa 1" in self.note

    @property
    def outlier(self) -> bool:
        return self.note.startswith("outlier")

    @property
    def held_back(self) -> bool:
        return self.card in HELD_BACK


def load_published(path: Path = DATA) -> list[PublishedRow]:
    """The data file's rows, checked: every field present, a source URL, a known model and test."""
    rows: list[PublishedRow] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {FIELDS}")
        for i, raw in enumerate(reader, start=2):
            row = PublishedRow(**{**raw, "tokens_per_s": float(raw["tokens_per_s"])})  # type: ignore[arg-type]
            where = f"{path.name} line {i}"
            if not row.source.startswith("https://"):
                raise ValueError(f"{where}: no source URL")
            if not (row.card and row.profile and row.build and row.date):
                raise ValueError(f"{where}: card, profile, build and date are required")
            if row.model not in SHAPES or row.backend not in BACKENDS:
                raise ValueError(f"{where}: unknown model {row.model!r} or backend {row.backend!r}")
            if row.test[:2] not in ("pp", "tg") or not row.test[2:].isdigit():
                raise ValueError(f"{where}: unknown test {row.test!r}")
            if not row.tokens_per_s > 0:
                raise ValueError(f"{where}: tokens/s must be positive")
            rows.append(row)
    return rows


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


def predict(rows: list[PublishedRow], folder: Path) -> list[Scored]:
    """Each row's test priced by the planner's speed model on the row's card profile."""
    from testkit.machines import cpu_machine
    from vrampilot.gguf.spec import load_model_spec
    from vrampilot.hardware.profiles import find_profile
    from vrampilot.planner.memory import memory_breakdown
    from vrampilot.planner.settings import Settings
    from vrampilot.planner.speed import SpeedModel
    from vrampilot.planner.target import TargetRequest, resolve_target

    machine = cpu_machine(ram_gib=64)
    specs = {}
    out: list[Scored] = []
    for row in rows:
        key = (row.model, row.quant)
        if key not in specs:
            path = write_shape_header_only(
                folder / f"{row.model}-{row.quant}.gguf", SHAPES[row.model], recipe=row.quant
            )
            specs[key] = load_model_spec(path)
        spec = specs[key]
        target = resolve_target(TargetRequest(profile=find_profile(row.profile)), machine)
        # The row's backend names the device as llama.cpp does ("ROCm0"), which the model reads.
        target = replace(target, gpus=tuple(replace(g, llama_name=f"{row.backend}0") for g in target.gpus))
        settings = Settings(
            n_ctx=max(1024, row.n_tokens * 2),
            n_gpu_layers=spec.n_layer + 1,
            n_batch=2048,
            n_ubatch=512,
            flash_attn=row.flash_attn,
        )
        model = SpeedModel(spec, settings, target, memory_breakdown(spec, settings, target))
        if row.kind == "prompt":
            predicted = row.n_tokens / model.prefill_seconds(row.n_tokens, 0)
        else:
            predicted = 1.0 / model.decode_seconds(max(1, row.n_tokens // 2))
        out.append(Scored(row, predicted))
    return out


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


def report(scored: list[Scored], markdown: bool = False) -> str:
    lines: list[str] = []
    for label, held in (("fitted", False), ("held-back", True)):
        part = [s for s in scored if s.row.held_back == held]
        if markdown:
            lines.append(f"\n**{label.capitalize()} rows**\n")
            lines.append("| card | backend | model | test | published tok/s | predicted | ratio | build, date |")
            lines.append("| --- | --- | --- | --- | ---: | ---: | ---: | --- |")
        else:
            lines.append(f"\n== {label} rows ==")
        for s in part:
            r = s.row
            flag = " (outlier, not scored)" if r.outlier else ("" if s.within_goal else " *")
            model = f"{r.model} {r.quant}"
            if markdown:
                lines.append(
                    f"| {r.card} | {r.backend} | {model} | {r.test} | {r.tokens_per_s:,.1f} | "
                    f"{s.predicted:,.1f} | {s.ratio:.2f}{flag} | {r.build}, {r.date} |"
                )
            else:
                lines.append(
                    f"{r.card:15} {r.backend:6} {model:18} {r.test:6} published {r.tokens_per_s:9.1f} "
                    f"predicted {s.predicted:9.1f}  ratio {s.ratio:5.2f}{flag}"
                )
        lines.append("")
        lines.extend(_summary(part, label))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = parser.parse_args(argv)
    rows = load_published(args.data)
    with tempfile.TemporaryDirectory(prefix="vrampilot-published-") as tmp:
        scored = predict(rows, Path(tmp))
    print(f"{len(rows)} published rows, {len({r.card for r in rows})} cards, {len({r.source for r in rows})} sources")
    print(report(scored, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
