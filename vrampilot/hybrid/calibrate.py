"""Finding retrieval heads by calibration (DuoAttention / RazorAttention, training-free).

Full-cache runs over synthetic passkey prompts that share nothing with the evaluation's prompts
(evaluate.passkey_prompt): their own wording; their own filler (a dozen harbour-town sentences, in
a random order or as one line repeated, where the evaluation repeats another line); their own keys
(another random stream); their own lengths (3K and 7.5K tokens, where the evaluation uses 2K and
8K: on this model retrieval only gets fragile near its trained 8K) and depths (random in 5-95%,
where the evaluation uses 0/25/50/75/100%). Each prompt is followed by its own answer,
teacher-forced, and for every query head we record the attention mass that the positions producing
the answer (the space before the key and its five digits) put on the needle sentence. That is wider
than the heads that copy the digits: on this model many heads, early layers included, look at the
needle while the answer starts, and keeping only the copying heads lost the answer's first tokens
at 8K. A KV head's score is the largest mean mass among its query heads: if any of them reads the
needle, the KV head has to keep it.

The ranking this produces is what `retrieval_heads` in config.py stores; `bench/hybrid_calibrate.py`
reruns it (deterministic: fixed seeds, greedy teacher forcing) and prints the tuple.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from vrampilot.hybrid.cache import AttentionCache, FullLayer
from vrampilot.hybrid.model import LlamaModel, ModelConfig

CAL_INTRO = (
    "Below is a long and dull text. Somewhere inside it a secret number is mentioned once. "
    "Read it carefully, because afterwards you will be asked for that number."
)
CAL_SENTENCES = (
    " Boats rock gently in the harbour.",
    " A gull circles slowly above the old pier.",
    " The baker opens his shop before dawn.",
    " Fishermen mend their nets on the quay.",
    " The church bell rings at noon.",
    " Children chase each other along the beach.",
    " A cold wind blows in from the north.",
    " The lighthouse keeper climbs the stairs.",
    " Tourists buy postcards at the kiosk.",
    " The tide slowly covers the rocks.",
    " An old dog sleeps in the sun.",
    " Lanterns are lit along the promenade.",
)
CAL_NEEDLE = " The secret number is {key}. Keep it in mind. {key} is the secret number."
CAL_QUESTION = " What is the secret number? The secret number is"
CAL_LINE = 5  # the repeated line: the first CAL_LINE sentences in order
CAL_LENGTHS = (3072, 7680)
CAL_CASES_PER_LENGTH = 4
CAL_SEED = 20250611  # not evaluate.passkey's seed (0): different keys and depths
# bench/hybrid_calibrate.py --budgets --spread N: prompts whose needles lie at every distance a
# head's window might end at (depths in equal bins; own seed, so other keys), where the shipped
# budgets' four random depths put the needles 3.1K-7.1K back (docs/hybrid-cache.md).
BUDGET_SEED = CAL_SEED + 1


@dataclass
class CalibrationCase:
    tokens: list[int]  # prompt + teacher-forced answer (" " and the five digits)
    needle: list[int]  # positions of the needle sentence
    answer_queries: list[int]  # positions whose next token is one of the answer's tokens
    key: str
    length: int
    depth: float


def calibration_cases(
    encode: Callable[[str], list[int]],
    *,
    lengths: Sequence[int] = CAL_LENGTHS,
    per_length: int = CAL_CASES_PER_LENGTH,
    seed: int = CAL_SEED,
    spread: bool = False,
) -> list[CalibrationCase]:
    """Calibration prompts; `spread`: case i of a length takes its depth from the i-th of
    `per_length` equal bins of 5-95% (random within it) rather than anywhere in that range."""
    rng = random.Random(seed)
    intro, question = encode(CAL_INTRO), encode(CAL_QUESTION)
    sentences = [encode(s) for s in CAL_SENTENCES]
    cases = []
    for length in lengths:
        for i in range(per_length):
            repeat = i % 2 == 1  # every other case repeats one fixed line, like the evaluation's filler does
            key = f"{rng.randrange(10000, 100000)}"
            depth = 0.05 + 0.9 * (i + rng.random()) / per_length if spread else rng.uniform(0.05, 0.95)
            needle = encode(CAL_NEEDLE.format(key=key))
            answer = encode(f" {key}")
            found = [i for i in range(len(needle) - len(answer) + 1) if needle[i : i + len(answer)] == answer]
            if len(found) != 2:
                raise ValueError(f"the key {key} is not tokenized the same in the needle and the answer")
            budget = length - len(intro) - len(needle) - len(question) - len(answer)
            filler: list[list[int]] = []
            while True:
                nxt = sentences[len(filler) % CAL_LINE] if repeat else sentences[rng.randrange(len(sentences))]
                if sum(map(len, filler)) + len(nxt) > budget:
                    break
                filler.append(nxt)
            cut = round(depth * len(filler))
            prefix = intro + [t for s in filler[:cut] for t in s]
            prompt = prefix + needle + [t for s in filler[cut:] for t in s] + question
            cases.append(
                CalibrationCase(
                    tokens=prompt + answer,
                    needle=list(range(len(prefix), len(prefix) + len(needle))),
                    answer_queries=list(range(len(prompt) - 1, len(prompt) + len(answer) - 1)),
                    key=key,
                    length=length,
                    depth=depth,
                )
            )
    return cases


class _WatchingLayer(FullLayer):
    """The full cache, which also gives subclasses the attention probabilities of the query positions
    in `watch` as each chunk passes. Its output is FullLayer's exactly."""

    def __init__(self, mc: ModelConfig, watch: Sequence[int]) -> None:
        super().__init__(mc)
        self.watch = torch.tensor(sorted(watch), dtype=torch.long)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int) -> torch.Tensor:
        out = super().attend(q, k, v, pos0)
        n = q.shape[1]
        rows = self.watch[(self.watch >= pos0) & (self.watch < pos0 + n)]
        if rows.numel():
            assert self.k is not None
            keys = self.k.float().repeat_interleave(self.n_group, dim=0)  # (n_head, T, d)
            logits = torch.einsum("hnd,htd->hnt", q[:, rows - pos0], keys) * self.scale
            causal = torch.arange(keys.shape[1])[None, :] <= rows[:, None]
            self.record(rows, torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1))
        return out

    def record(self, rows: torch.Tensor, probs: torch.Tensor) -> None:
        """probs (n_head, len(rows), T): what the watched query positions `rows` attend to."""
        raise NotImplementedError


class RecordingLayer(_WatchingLayer):
    """The full cache, which also records each query head's attention mass on `targets` from the
    query positions in `watch` (summed over those queries). Its output is FullLayer's exactly."""

    def __init__(self, mc: ModelConfig, watch: Sequence[int], targets: Sequence[int]) -> None:
        super().__init__(mc, watch)
        self.targets = torch.tensor(sorted(targets), dtype=torch.long)
        self.mass = torch.zeros(mc.n_head)

    def record(self, rows: torch.Tensor, probs: torch.Tensor) -> None:
        seen = self.targets[self.targets < probs.shape[-1]]  # later targets are masked anyway
        self.mass += probs[..., seen].sum(dim=(1, 2))


@dataclass
class Calibration:
    n_layer: int
    n_head_kv: int
    n_group: int
    q_scores: torch.Tensor  # (n_layer, n_head): mean attention mass on the needle per answer query
    correct: list[bool] = field(default_factory=list)  # teacher-forced argmax gives every digit

    @property
    def kv_scores(self) -> torch.Tensor:
        """(n_layer, n_head_kv): the best query head of each KV head."""
        return self.q_scores.view(self.n_layer, self.n_head_kv, self.n_group).amax(dim=-1)

    def ranking(self) -> list[tuple[int, int, float]]:
        s = self.kv_scores
        flat = [(il, h, float(s[il, h])) for il in range(self.n_layer) for h in range(self.n_head_kv)]
        return sorted(flat, key=lambda x: (-x[2], x[0], x[1]))

    def top(self, n: int) -> tuple[tuple[int, int], ...]:
        """The n best (layer, KV head) pairs, sorted by layer then head (the form config.py stores)."""
        return tuple(sorted((il, h) for il, h, _ in self.ranking()[:n]))

    def to_json(self) -> dict[str, Any]:
        return {
            "q_scores": [[round(float(x), 5) for x in row] for row in self.q_scores],
            "kv_ranking": [[il, h, round(sc, 5)] for il, h, sc in self.ranking()],
            "cases_correct": self.correct,
        }


def calibrate(
    model: LlamaModel,
    cases: Sequence[CalibrationCase],
    *,
    chunk: int = 256,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    mc = model.config
    total = torch.zeros(mc.n_layer, mc.n_head)
    correct = []
    for i, case in enumerate(cases):
        layers = [RecordingLayer(mc, case.answer_queries, case.needle) for _ in range(mc.n_layer)]
        cache = AttentionCache(layers, "calibration")
        tokens = torch.tensor(case.tokens)
        hidden = torch.cat(
            [model.forward_hidden(tokens[s : s + chunk], s, cache) for s in range(0, len(tokens), chunk)]
        )
        first, last = case.answer_queries[0], case.answer_queries[-1]
        with torch.inference_mode():
            pred = model.logits(hidden[first : last + 1]).argmax(dim=-1)
        ok = pred.tolist() == case.tokens[first + 1 : last + 2]
        correct.append(ok)
        total += torch.stack([layer.mass for layer in layers]) / len(case.answer_queries)
        if progress:
            progress(
                f"calibration case {i + 1}/{len(cases)}: {case.length} tokens, depth {case.depth:.2f}, "
                f"full cache {'answers' if ok else 'misses'}"
            )
    return Calibration(mc.n_layer, mc.n_head_kv, mc.n_group, total / len(cases), correct)


# --- per-head budgets ------------------------------------------------------------------------------
# Distances (tokens before the query, sinks aside) at which a head's window might end: the far mass
# is measured beyond each, and budgets.allocate_reach picks one per head.
FAR_DISTANCES = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144)


class FarMassLayer(_WatchingLayer):
    """The full cache, which also records, for every query head and watched query position, the
    attention mass that position puts on keys further back than each of `distances` (the sinks,
    which every head keeps, excluded): what a head would lose with a window of that length. Its
    output is FullLayer's exactly."""

    def __init__(
        self, mc: ModelConfig, watch: Sequence[int], n_sink: int, distances: Sequence[int] = FAR_DISTANCES
    ) -> None:
        super().__init__(mc, watch)
        self.n_sink = n_sink
        self.distances = torch.tensor(list(distances), dtype=torch.long)
        self.row_mass = torch.zeros(mc.n_head, len(self.watch), len(distances))  # per watched position
        self.n_watched = 0

    @property
    def mass(self) -> torch.Tensor:
        """(n_head, distances): summed over the watched positions."""
        return self.row_mass.sum(dim=1)

    def record(self, rows: torch.Tensor, probs: torch.Tensor) -> None:
        kpos = torch.arange(probs.shape[-1])
        # far[n, j, t]: key t is not a sink and lies more than distances[j] tokens before query n.
        far = (kpos[None, None, :] >= self.n_sink) & (
            kpos[None, None, :] < rows[:, None, None] - self.distances[None, :, None]
        )
        self.row_mass[:, torch.searchsorted(self.watch, rows)] += torch.einsum("hnt,njt->hnj", probs, far.float())
        self.n_watched += int(rows.numel())


def far_mass_rows(
    model: LlamaModel,
    tokens: list[int],
    watch: Sequence[int],
    n_sink: int,
    *,
    distances: Sequence[int] = FAR_DISTANCES,
    chunk: int = 256,
) -> torch.Tensor:
    """(n_layer, n_head, len(watch), len(distances)): every query head's mass beyond each distance at
    each watched position (sorted), full cache, one sequence."""
    mc = model.config
    layers = [FarMassLayer(mc, watch, n_sink, distances) for _ in range(mc.n_layer)]
    cache = AttentionCache(layers, "far-mass")
    ids = torch.tensor(tokens)
    for s in range(0, len(ids), chunk):
        model.forward_hidden(ids[s : s + chunk], s, cache)
    return torch.stack([layer.row_mass for layer in layers])


def kv_far_mass(rows: torch.Tensor, n_head_kv: int, weights: Sequence[float] | None = None) -> torch.Tensor:
    """(n_layer, n_head_kv, distances) from far_mass_rows' output: the watched positions' mean (or
    their `weights`, summing to 1), then the largest over each KV head's query heads (one head that
    reads far is enough to need the tokens)."""
    n_layer, n_head, n_rows, n_dist = rows.shape
    w = torch.full((n_rows,), 1.0 / n_rows) if weights is None else torch.tensor(list(weights), dtype=rows.dtype)
    if w.shape != (n_rows,):
        raise ValueError(f"{len(w)} weights for {n_rows} watched positions")
    per_q = torch.einsum("lhrd,r->lhd", rows, w)
    return per_q.view(n_layer, n_head_kv, n_head // n_head_kv, n_dist).amax(dim=2)


def far_mass(
    model: LlamaModel,
    sequences: Sequence[tuple[list[int], Sequence[int]]],
    n_sink: int,
    *,
    distances: Sequence[int] = FAR_DISTANCES,
    chunk: int = 256,
    progress: Callable[[str], None] | None = None,
) -> torch.Tensor:
    """(n_layer, n_head_kv, len(distances)): per KV head, the mean attention mass its query heads (the
    largest of them) put beyond each distance, over the watched positions of every (tokens, watched
    positions) sequence, full cache."""
    mc = model.config
    total = torch.zeros(mc.n_layer, mc.n_head, len(distances))
    for i, (tokens, watch) in enumerate(sequences):
        rows = far_mass_rows(model, tokens, watch, n_sink, distances=distances, chunk=chunk)
        total += rows.mean(dim=2)
        if progress:
            progress(f"far mass {i + 1}/{len(sequences)}: {len(tokens)} tokens, {len(watch)} watched positions")
    return kv_far_mass((total / len(sequences)).unsqueeze(2), mc.n_head_kv)  # one "position": the mean


# --- choosing among allocations by the answer itself ------------------------------------------------
# bench/hybrid_calibrate.py --select: allocations (budgets.py's, from different aggregation rules)
# are compared on prompts of their own seed, neither the budgets' prompts nor the evaluation's, by
# what the hybrid cache makes of the answer: the far mass ranks heads, but whether the reply starts
# with the key at all is one logit margin (docs/hybrid-cache.md), which no
# allocation rule sees.
SELECT_SEED = CAL_SEED + 2


@dataclass(frozen=True)
class AnswerMargins:
    """What a cache makes of one calibration prompt's teacher-forced answer (space, then digits)."""

    margins: tuple[float, ...]  # per answer position: logit of the right token - the best other

    @property
    def correct(self) -> bool:
        """Greedy decoding gives the whole key (every teacher-forced argmax right)."""
        return all(m > 0 for m in self.margins)

    @property
    def first(self) -> float:
        """The first position's: whether the reply starts with the key at all."""
        return self.margins[0]


def answer_margins(
    model: LlamaModel, cache: AttentionCache, case: CalibrationCase, *, chunk: int = 256
) -> AnswerMargins:
    """Prefill `case`'s prompt into `cache`, then its answer teacher-forced, and the margins there."""
    first = case.answer_queries[0]
    ids = torch.tensor(case.tokens)
    for s in range(0, first, chunk):
        model.forward_hidden(ids[s : min(s + chunk, first)], s, cache)
    hidden = model.forward_hidden(ids[first:], first, cache)
    with torch.inference_mode():
        logits = model.logits(hidden[: len(case.answer_queries)]).float()
    out = []
    for row, target in zip(logits, case.tokens[first + 1 :], strict=False):
        other = row.clone()
        other[target] = float("-inf")
        out.append(round(float(row[target] - other.max()), 4))
    return AnswerMargins(tuple(out))


def selection_score(results: Sequence[AnswerMargins]) -> tuple[int, float]:
    """How an allocation ranks on the selection prompts: keys answered, then the mean of each
    prompt's thinnest margin (how far from flipping the answers are, right or wrong)."""
    return sum(r.correct for r in results), sum(min(r.margins) for r in results) / max(len(results), 1)
