"""Published llama-bench results of real cards (bench/data/published_llama_bench.csv): the rows,
checked as they load, the published models' dimensions and the fixed split into fitted and
held-back cards. bench/published_speed.py prices them; the tests check the data file."""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

from testkit.gguf_models import BIG, ArchShape

DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "published_llama_bench.csv"
FIELDS = ("card", "profile", "backend", "model", "quant", "test", "tokens_per_s", "build", "date", "source", "note")
BACKENDS = ("CUDA", "ROCm", "Vulkan")
# Cards kept out of the fit, chosen before their errors were looked at: one of each kind the data
# has (a GeForce and a workstation Ampere card, Ada, HBM Hopper, RDNA2 under ROCm and Vulkan, and
# of the 2025 Vulkan runs a Turing and a workstation Ampere card, the Turing one with a tiny model).
HELD_BACK = frozenset({"RTX 3070", "RTX 4080", "RTX A6000", "H100 PCIe", "RX 6700 XT", "RTX 2080 Ti", "RTX A4000"})
DECODE_GOAL = 0.15
PROMPT_GOAL = 0.25

# The published models' dimensions (their released configs; the sources' llama-bench lines give
# their parameter counts: llama 7B 6.74 B, mistral 7B 7.24 B, llama 8B 8.03 B, llama 3B 3.21 B,
# llama 1B 1.10 B, qwen2 14B 14.77 B).
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
    "llama-3.2-3b": ArchShape(
        arch="llama",
        name="Llama-3.2-3B-Instruct",
        n_layer=28,
        n_embd=3072,
        n_head=24,
        n_head_kv=8,
        n_ff=8192,
        n_vocab=128256,
        n_ctx_train=131072,
        rope_freq_base=500000.0,
        tied=True,
    ),
    "tinyllama-1.1b": ArchShape(
        arch="llama",
        name="TinyLlama-1.1B",
        n_layer=22,
        n_embd=2048,
        n_head=32,
        n_head_kv=4,
        n_ff=5632,
        n_vocab=32000,
        n_ctx_train=2048,
        tied=False,
    ),
    "qwen2-14b": replace(
        BIG["qwen2.5-7b"],
        name="DeepSeek-R1-Distill-Qwen-14B",
        n_layer=48,
        n_embd=5120,
        n_head=40,
        n_head_kv=8,
        n_ff=13824,
        n_ctx_train=131072,
    ),
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

    @property
    def era(self) -> str:
        """The half-year of its build ("2024-H1"), from its date."""
        year, month = self.date.split("-")[:2]
        return f"{year}-H{1 if int(month) <= 6 else 2}"


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
