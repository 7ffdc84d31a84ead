"""The evaluation protocol of docs guide/hybrid-cache.md: perplexity, passkey retrieval, bytes and speed
for the full cache, the hybrid cache and a plain window holding the same bytes, in one run.

Perplexity: the text is tokenized once and cut into disjoint samples of the longest length; each
sample runs through each cache in prefill chunks, and the loss of every next-token prediction is
kept. ppl at length L is exp(mean loss over the first L tokens of every sample): the model is causal
and no cache looks ahead, so the first L tokens of a longer run are exactly a run of length L.
The window baseline is sized per length to the hybrid's bytes at that length, so it runs once per
length.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from vrampilot.hybrid.cache import AttentionCache, full_cache, hybrid_cache, window_cache, window_for_bytes
from vrampilot.hybrid.config import HybridConfig
from vrampilot.hybrid.layer_plan import config_kv_bytes
from vrampilot.hybrid.model import LlamaModel, default_threads
from vrampilot.hybrid.passkey_keys import passkey_keys

PREFILL_CHUNK = 256
PASSKEY_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
LOSS_BUCKET = 256  # tokens per point of the loss-against-position curve

Progress = Callable[[str], None]


class Tokenizer:
    """llama.cpp's own tokenizer for the file (vocab only), so token ids are the engine's ids."""

    def __init__(self, model_path: str | os.PathLike[str]) -> None:
        from vrampilot import llamacpp

        self._llm = llamacpp.load().Llama(str(model_path), vocab_only=True, verbose=False)

    def encode(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self._llm.detokenize(list(ids)).decode("utf-8", errors="replace")
        return text


def setup_torch(threads: int | None = None) -> None:
    torch.set_num_threads(threads or default_threads())


def run_tokens(
    model: LlamaModel,
    cache: AttentionCache,
    tokens: torch.Tensor,
    *,
    chunk: int = PREFILL_CHUNK,
    marks: Sequence[int] = (),
    on_mark: Callable[[int], None] | None = None,
    decode_tail: int = 0,
) -> tuple[torch.Tensor, float | None]:
    """Feed `tokens` in chunks; return the loss of each next-token prediction (len(tokens) - 1) and,
    with decode_tail, the milliseconds per token of feeding the last decode_tail tokens one at a time.

    One token at a time through the same cache is exactly a decode step (teacher-forced instead of
    sampled, same cost), and the losses do not change: chunking gives the same results. So the speed
    measurement costs no extra prefill. `on_mark(n)` runs once the cache holds n tokens for each n in
    `marks` (chunks split there), so callers can read bytes held at exactly those lengths.
    """
    n = tokens.shape[0]
    chunk = min(chunk, cache.max_chunk or chunk)
    tail_start = n - decode_tail if decode_tail else n
    cuts = sorted({*range(0, tail_start, chunk), *range(tail_start, n), *(m for m in marks if 0 < m < n), n})
    losses = []
    t_tail: float | None = None
    for start, end in itertools.pairwise(cuts):
        if start == tail_start:
            t_tail = time.perf_counter()
        hidden = model.forward_hidden(tokens[start:end], start, cache)
        with torch.inference_mode():
            logits = model.logits(hidden)
            targets = tokens[start + 1 : end + 1]
            losses.append(torch.nn.functional.cross_entropy(logits[: targets.shape[0]], targets, reduction="none"))
        if on_mark is not None and end in marks:
            on_mark(end)
    ms = None if t_tail is None else (time.perf_counter() - t_tail) * 1000.0 / decode_tail
    return torch.cat(losses), ms


# The caches every evaluation compares, in report order: the f16 full cache, the hybrid, and two
# baselines holding no more bytes than the hybrid at each length: sinks + a window in f16
# (StreamingLLM), and a uniform llama.cpp-style q4_0 cache cut to a window the same way.
METHODS = ("full", "hybrid", "window", "q4")
BASELINE_STORAGE = {"window": "f16", "q4": "q4"}


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate: sound at 0/n and n/n, where the normal
    approximation gives an interval of width zero."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class MethodResult:
    ppl: dict[int, float] = field(default_factory=dict)
    kv_bytes: dict[int, int] = field(default_factory=dict)
    passkey_correct: dict[int, int] = field(default_factory=dict)  # per prompt length
    passkey_cases: dict[int, int] = field(default_factory=dict)
    decode_ms_per_token: float | None = None
    loss_curve: list[float] = field(default_factory=list)  # mean loss per LOSS_BUCKET positions
    window_tokens: dict[int, int] = field(default_factory=dict)  # baselines only

    @property
    def passkey_acc(self) -> float | None:
        n = sum(self.passkey_cases.values())
        return sum(self.passkey_correct.values()) / n if n else None

    @property
    def passkey_by_length(self) -> dict[int, float]:
        return {n: self.passkey_correct[n] / c for n, c in self.passkey_cases.items() if c}

    def to_json(self) -> dict[str, Any]:
        return {
            "ppl": {str(k): round(v, 4) for k, v in self.ppl.items()},
            "kv_bytes": {str(k): v for k, v in self.kv_bytes.items()},
            "passkey_acc": None if self.passkey_acc is None else round(self.passkey_acc, 4),
            "passkey": {
                str(n): {
                    "correct": self.passkey_correct[n],
                    "cases": c,
                    "ci95": [round(x, 4) for x in wilson_interval(self.passkey_correct[n], c)],
                }
                for n, c in self.passkey_cases.items()
            },
            "decode_ms_per_token": None if self.decode_ms_per_token is None else round(self.decode_ms_per_token, 2),
            **({"window_tokens": {str(k): v for k, v in self.window_tokens.items()}} if self.window_tokens else {}),
        }


@dataclass
class EvalResult:
    model: str
    text: str
    config: HybridConfig
    lengths: list[int]
    n_samples: int
    f16_full_bytes: dict[int, int]
    methods: dict[str, MethodResult]
    passkey_cases: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "text": self.text,
            "config": self.config.name,
            "samples": self.n_samples,
            "passkey_n_cases": len(self.passkey_cases),
            "f16_full_kv_bytes": {str(k): v for k, v in self.f16_full_bytes.items()},
            **{name: res.to_json() for name, res in self.methods.items()},
        }


def _bucket(losses: torch.Tensor) -> list[float]:
    return [float(losses[i : i + LOSS_BUCKET].mean()) for i in range(0, losses.shape[0], LOSS_BUCKET)]


def baseline_cache(model: LlamaModel, cfg: HybridConfig, method: str, n_tokens: int) -> tuple[AttentionCache, int]:
    """A same-bytes baseline for a run of n_tokens, and its window: the longest that holds no more
    than the hybrid does after n_tokens (sinks as the hybrid's)."""
    mc = model.config
    storage = BASELINE_STORAGE[method]
    w = window_for_bytes(mc, config_kv_bytes(cfg, mc.cache_shape, n_tokens), cfg.n_sink, storage)
    return window_cache(mc, model.rope, w, cfg.n_sink, storage=storage), w


def perplexity(
    model: LlamaModel,
    tokens: list[int],
    lengths: Sequence[int],
    cfg: HybridConfig,
    *,
    max_samples: int | None = None,
    decode_steps: int = 16,
    progress: Progress | None = None,
    methods: Collection[str] = METHODS,
) -> tuple[dict[str, MethodResult], int]:
    """Perplexity at each length for every method in `methods` (of METHODS); fills kv_bytes, the loss
    curves, and decode ms/token at the longest length (the last decode_steps tokens of sample 1)."""
    mc = model.config
    lengths = sorted(lengths)
    longest = lengths[-1]
    n_samples = len(tokens) // longest
    if n_samples == 0:
        raise ValueError(f"the text has {len(tokens)} tokens; the longest length {longest} needs at least that many")
    if max_samples is not None:
        n_samples = min(n_samples, max_samples)
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose of {METHODS}")
    results = {name: MethodResult() for name in METHODS if name in methods}
    sums: dict[str, dict[int, float]] = {name: {} for name in results}
    curves: dict[str, list[torch.Tensor]] = {name: [] for name in results}

    def record(name: str, losses: torch.Tensor, length: int, n_pred: int) -> None:
        sums[name][length] = sums[name].get(length, 0.0) + float(losses[:n_pred].sum())

    for s in range(n_samples):
        sample = torch.tensor(tokens[s * longest : (s + 1) * longest])
        make: Callable[[], AttentionCache]  # the two lambdas below
        for name, make in (
            ("full", lambda: full_cache(mc)),
            ("hybrid", lambda: hybrid_cache(mc, model.rope, cfg)),
        ):
            if name not in results:
                continue
            t0 = time.perf_counter()
            res = results[name]
            cache = make()
            losses, ms = run_tokens(
                model,
                cache,
                sample,
                marks=lengths,
                decode_tail=decode_steps if s == 0 else 0,
                on_mark=partial(_record_bytes, res.kv_bytes, cache),
            )
            if ms is not None:
                res.decode_ms_per_token = ms
            for length in lengths:
                record(name, losses, length, length - 1)
            curves[name].append(losses)
            if progress:
                progress(f"sample {s + 1}/{n_samples} {name}: {longest} tokens in {time.perf_counter() - t0:.0f} s")
        # Each baseline is sized to the hybrid's bytes at each length, so it runs once per length.
        for name in BASELINE_STORAGE:
            if name not in results:
                continue
            res = results[name]
            for length in lengths:
                t0 = time.perf_counter()
                cache, w = baseline_cache(model, cfg, name, length)
                res.window_tokens[length] = w
                losses, ms = run_tokens(
                    model,
                    cache,
                    sample[:length],
                    marks=[length],
                    decode_tail=decode_steps if s == 0 and length == longest else 0,
                    on_mark=partial(_record_bytes, res.kv_bytes, cache),
                )
                if ms is not None:
                    res.decode_ms_per_token = ms
                record(name, losses, length, length - 1)
                if length == longest:
                    curves[name].append(losses)
                if progress:
                    progress(
                        f"sample {s + 1}/{n_samples} {name} W={w}: {length} tokens in {time.perf_counter() - t0:.0f} s"
                    )

    for name, res in results.items():
        for length in lengths:
            res.ppl[length] = math.exp(sums[name][length] / (n_samples * (length - 1)))
        res.loss_curve = _bucket(torch.stack(curves[name]).mean(dim=0))
    return results, n_samples


# --- passkey -------------------------------------------------------------------------------------
_PASSKEY_INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there."
)
_PASSKEY_FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
_PASSKEY_NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key."
_PASSKEY_QUESTION = " What is the pass key? The pass key is"


def passkey_prompt(tok: Tokenizer, length: int, depth: float, key: str) -> list[int]:
    """About `length` tokens of filler with the key sentence at `depth` (0 = start, 1 = just before
    the question). Pieces are tokenized separately and each starts with a space, as in running text."""
    intro = tok.encode(_PASSKEY_INTRO)
    filler = tok.encode(_PASSKEY_FILLER)
    needle = tok.encode(_PASSKEY_NEEDLE.format(key=key))
    question = tok.encode(_PASSKEY_QUESTION)
    n_fill = max(0, (length - len(intro) - len(needle) - len(question)) // len(filler))
    before = round(depth * n_fill)
    return intro + filler * before + needle + filler * (n_fill - before) + question


def prefill(
    model: LlamaModel, cache: AttentionCache, tokens: Sequence[int], pos0: int = 0, *, chunk: int = PREFILL_CHUNK
) -> torch.Tensor | None:
    """Feed tokens at positions pos0.. in chunks; the last chunk's hidden states (None if no tokens)."""
    ids = torch.tensor(list(tokens), dtype=torch.long)
    chunk = min(chunk, cache.max_chunk or chunk)
    hidden: torch.Tensor | None = None
    for start in range(0, len(ids), chunk):
        hidden = model.forward_hidden(ids[start : start + chunk], pos0 + start, cache)
    return hidden


def greedy(
    model: LlamaModel,
    cache: AttentionCache,
    prompt: list[int],
    max_tokens: int,
    *,
    chunk: int = PREFILL_CHUNK,
    held: int = 0,
) -> Iterator[int]:
    """Prefill `prompt` and yield greedy tokens; the cache must hold exactly its first `held` tokens."""
    hidden = prefill(model, cache, prompt[held:], held, chunk=chunk)
    assert hidden is not None
    pos = len(prompt)
    for _ in range(max_tokens):
        nxt = int(model.logits(hidden[-1]).argmax())
        yield nxt
        hidden = model.forward_hidden(torch.tensor([nxt]), pos, cache)
        pos += 1


def _common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    n = min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != prompts[0][i] for p in prompts[1:]):
            return i
    return n


def passkey(
    model: LlamaModel,
    tok: Tokenizer,
    lengths: Sequence[int],
    methods: dict[str, Callable[[int], AttentionCache]],
    *,
    depths: Sequence[float] = PASSKEY_DEPTHS,
    trials: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
    on_cases: Callable[[list[dict[str, Any]]], None] | None = None,
    done: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """`trials` cases per (length, depth), each with its own random 5-digit key; every method sees the
    same cases. `methods[name](prompt_len)` builds a fresh cache for a prompt of that many tokens.
    The keys come from one seeded stream in a fixed order (length, depth, trial), so fewer trials
    give the first cases of more.

    Cases run one key at every depth, then the next key (so a run stopped early has sampled every
    depth alike), and each is handed to `on_cases` as it completes; cases in `done` (a stopped
    run's, same seed) are kept and not run again. The cases of one (length, depth) share everything
    before the key's first differing token, so each method reads that prefix once and each case
    continues from a copy of the cache: the same tokens at the same positions, in other prefill
    chunks (chunking does not change what a cache computes).
    """
    keys = passkey_keys(lengths, depths, trials, seed)
    finished = {(c["length"], c["depth"], c["key"]): c for c in done}
    cases: list[dict[str, Any]] = list(done)
    for length in lengths:
        prompts = {d: [passkey_prompt(tok, length, d, key) for key in keys[(length, d)]] for d in depths}
        shared = {d: _common_prefix(p) if len(p) > 1 else 0 for d, p in prompts.items()}
        bases: dict[tuple[float, str], AttentionCache] = {}
        for trial, depth in itertools.product(range(trials), depths):
            key, prompt = keys[(length, depth)][trial], prompts[depth][trial]
            if (length, depth, key) in finished:
                continue
            case: dict[str, Any] = {"length": length, "depth": depth, "key": key, "prompt_tokens": len(prompt)}
            for name, make in methods.items():
                base = bases.get((depth, name))
                if base is None:
                    # Sized for the shortest prompt of the depth: a same-bytes baseline then holds no more.
                    base = bases[(depth, name)] = make(min(len(p) for p in prompts[depth]))
                    prefill(model, base, prompt[: shared[depth]])
                last = all((length, depth, k) in finished for k in keys[(length, depth)][trial + 1 :])
                cache = bases.pop((depth, name)) if last else copy.deepcopy(base)
                out = tok.decode(list(greedy(model, cache, prompt, 8, held=shared[depth])))
                found = re.search(r"\d{5}", out.replace(" ", ""))
                case[name] = bool(found and found.group(0) == key)
                case[f"{name}_text"] = out
            cases.append(case)
            if on_cases is not None:
                on_cases(list(cases))  # after each case: a long run that stops keeps what it measured
            if progress:
                progress(
                    f"passkey {length} depth {depth:.2f} key {trial + 1}/{trials}: "
                    + ", ".join(f"{n}={'yes' if case[n] else 'no'}" for n in methods)
                )
    return sorted(cases, key=lambda c: (c["length"], c["depth"], keys[(c["length"], c["depth"])].index(c["key"])))


def evaluate(
    model_path: str | os.PathLike[str],
    text_path: str | os.PathLike[str],
    lengths: Sequence[int],
    cfg: HybridConfig,
    *,
    with_passkey: bool = False,
    passkey_lengths: Sequence[int] | None = None,
    passkey_depths: Sequence[float] = PASSKEY_DEPTHS,
    passkey_trials: int = 1,
    max_samples: int | None = None,
    decode_steps: int = 16,
    progress: Progress | None = None,
) -> EvalResult:
    t_start = time.perf_counter()
    setup_torch()
    model = LlamaModel(model_path)
    mc = model.config
    tok = Tokenizer(model_path)
    tokens = tok.encode(Path(text_path).read_text(encoding="utf-8"))
    lengths = sorted(lengths)
    if lengths[-1] > mc.n_ctx_train:
        raise ValueError(f"length {lengths[-1]} is beyond the model's trained context {mc.n_ctx_train}")
    results, n_samples = perplexity(
        model, tokens, lengths, cfg, max_samples=max_samples, decode_steps=decode_steps, progress=progress
    )
    if progress:
        progress(
            f"decode ms/token at {lengths[-1]}: "
            + ", ".join(
                f"{name} {res.decode_ms_per_token:.1f}"
                for name, res in results.items()
                if res.decode_ms_per_token is not None
            )
        )
    cases: list[dict[str, Any]] = []
    if with_passkey:
        plens = sorted(passkey_lengths or [n for n in lengths if n <= 8192])
        cases = run_passkey(
            model, tok, cfg, plens, results, depths=passkey_depths, trials=passkey_trials, progress=progress
        )
    return EvalResult(
        model=str(model_path),
        text=str(text_path),
        config=cfg,
        lengths=list(lengths),
        n_samples=n_samples,
        f16_full_bytes={n: n * mc.f16_kv_bytes_per_token for n in lengths},
        methods=results,
        passkey_cases=cases,
        seconds=time.perf_counter() - t_start,
    )


def run_passkey(
    model: LlamaModel,
    tok: Tokenizer,
    cfg: HybridConfig,
    lengths: Sequence[int],
    results: dict[str, MethodResult],
    *,
    depths: Sequence[float] = PASSKEY_DEPTHS,
    trials: int = 1,
    progress: Progress | None = None,
    on_cases: Callable[[list[dict[str, Any]]], None] | None = None,
    done: Sequence[dict[str, Any]] = (),
    only: Collection[str] = METHODS,
) -> list[dict[str, Any]]:
    """Passkey cases for every method in `only` (of METHODS), counted into `results` per prompt length."""
    mc = model.config
    every: dict[str, Callable[[int], AttentionCache]] = {
        "full": lambda n: full_cache(mc),
        "hybrid": lambda n: hybrid_cache(mc, model.rope, cfg),
        **{name: partial(lambda name, n: baseline_cache(model, cfg, name, n)[0], name) for name in BASELINE_STORAGE},
    }
    methods = {name: make for name, make in every.items() if name in only}
    cases = passkey(
        model, tok, lengths, methods, depths=depths, trials=trials, progress=progress, on_cases=on_cases, done=done
    )
    for name in methods:
        res = results.setdefault(name, MethodResult())
        for n in lengths:
            sub = [c[name] for c in cases if c["length"] == n]
            res.passkey_correct[n] = sum(sub)
            res.passkey_cases[n] = len(sub)
    return cases


def hybrid_bytes_at(model: LlamaModel, cfg: HybridConfig, n_tokens: int) -> int:
    """Bytes the hybrid cache holds after n tokens: they depend on the count only, not on the
    tokens (layer_plan.py counts them; tests hold the count to real runs)."""
    return config_kv_bytes(cfg, model.config.cache_shape, n_tokens)


def _record_bytes(into: dict[int, int], cache: AttentionCache, n_tokens: int) -> None:
    """At each mark of a run: the bytes the cache holds after `n_tokens` tokens."""
    into[n_tokens] = cache.bytes_held()
