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

import itertools
import math
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from vrampilot.hybrid.cache import AttentionCache, full_cache, hybrid_cache, window_cache, window_for_bytes
from vrampilot.hybrid.config import HybridConfig
from vrampilot.hybrid.model import LlamaModel, default_threads

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
        return self._llm.detokenize(list(ids)).decode("utf-8", errors="replace")


def setup_torch(threads: int | None = None) -> None:
    torch.set_num_threads(threads or default_threads())


def run_tokens(
    model: LlamaModel, cache: AttentionCache, tokens: torch.Tensor, *, chunk: int = PREFILL_CHUNK,
    marks: Sequence[int] = (), on_mark: Callable[[int], None] | None = None, decode_tail: int = 0,
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


@dataclass
class MethodResult:
    ppl: dict[int, float] = field(default_factory=dict)
    kv_bytes: dict[int, int] = field(default_factory=dict)
    passkey_acc: float | None = None
    passkey_by_length: dict[int, float] = field(default_factory=dict)
    decode_ms_per_token: float | None = None
    loss_curve: list[float] = field(default_factory=list)  # mean loss per LOSS_BUCKET positions
    window_tokens: dict[int, int] = field(default_factory=dict)  # window baseline only

    def to_json(self) -> dict[str, Any]:
        return {
            "ppl": {str(k): round(v, 4) for k, v in self.ppl.items()},
            "kv_bytes": {str(k): v for k, v in self.kv_bytes.items()},
            "passkey_acc": None if self.passkey_acc is None else round(self.passkey_acc, 4),
            "decode_ms_per_token": None if self.decode_ms_per_token is None else round(self.decode_ms_per_token, 2),
        }


@dataclass
class EvalResult:
    model: str
    text: str
    config: HybridConfig
    lengths: list[int]
    n_samples: int
    f16_full_bytes: dict[int, int]
    full: MethodResult
    hybrid: MethodResult
    window: MethodResult
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
            "full": self.full.to_json(),
            "hybrid": self.hybrid.to_json(),
            "window": {**self.window.to_json(), "window_tokens": {str(k): v for k, v in self.window.window_tokens.items()}},
        }


def _bucket(losses: torch.Tensor) -> list[float]:
    return [float(losses[i : i + LOSS_BUCKET].mean()) for i in range(0, losses.shape[0], LOSS_BUCKET)]


def perplexity(
    model: LlamaModel, tokens: list[int], lengths: Sequence[int], cfg: HybridConfig, *, max_samples: int | None = None,
    decode_steps: int = 16, progress: Progress | None = None,
) -> tuple[MethodResult, MethodResult, MethodResult, int]:
    """Perplexity at each length for full, hybrid and the same-bytes window; fills kv_bytes, the loss
    curves, and decode ms/token at the longest length (the last decode_steps tokens of sample 1)."""
    mc = model.config
    lengths = sorted(lengths)
    longest = lengths[-1]
    n_samples = len(tokens) // longest
    if n_samples == 0:
        raise ValueError(f"the text has {len(tokens)} tokens; the longest length {longest} needs at least that many")
    if max_samples is not None:
        n_samples = min(n_samples, max_samples)
    full, hyb, win = MethodResult(), MethodResult(), MethodResult()
    sums: dict[str, dict[int, float]] = {"full": {}, "hybrid": {}, "window": {}}
    curves: dict[str, list[torch.Tensor]] = {"full": [], "hybrid": [], "window": []}

    for s in range(n_samples):
        sample = torch.tensor(tokens[s * longest : (s + 1) * longest])
        for name, res, make in (
            ("full", full, lambda: full_cache(mc)),
            ("hybrid", hyb, lambda: hybrid_cache(mc, model.rope, cfg)),
        ):
            t0 = time.perf_counter()
            cache = make()
            losses, ms = run_tokens(
                model, cache, sample, marks=lengths, decode_tail=decode_steps if s == 0 else 0,
                on_mark=partial(_record_bytes, res.kv_bytes, cache),
            )
            if ms is not None:
                res.decode_ms_per_token = ms
            for length in lengths:
                sums[name][length] = sums[name].get(length, 0.0) + float(losses[: length - 1].sum())
            curves[name].append(losses)
            if progress:
                progress(f"sample {s + 1}/{n_samples} {name}: {longest} tokens in {time.perf_counter() - t0:.0f} s")
        for length in lengths:
            w = window_for_bytes(mc, hyb.kv_bytes[length], cfg.n_sink)
            win.window_tokens[length] = w
            t0 = time.perf_counter()
            cache = window_cache(mc, model.rope, w, cfg.n_sink)
            losses, ms = run_tokens(
                model, cache, sample[:length], marks=[length],
                decode_tail=decode_steps if s == 0 and length == longest else 0,
                on_mark=partial(_record_bytes, win.kv_bytes, cache),
            )
            if ms is not None:
                win.decode_ms_per_token = ms
            sums["window"][length] = sums["window"].get(length, 0.0) + float(losses.sum())
            if length == longest:
                curves["window"].append(losses)
            if progress:
                progress(f"sample {s + 1}/{n_samples} window {w}: {length} tokens in {time.perf_counter() - t0:.0f} s")

    for name, res in (("full", full), ("hybrid", hyb), ("window", win)):
        for length in lengths:
            res.ppl[length] = math.exp(sums[name][length] / (n_samples * (length - 1)))
        res.loss_curve = _bucket(torch.stack(curves[name]).mean(dim=0))
    return full, hyb, win, n_samples


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


def greedy(model: LlamaModel, cache: AttentionCache, prompt: list[int], max_tokens: int, *, chunk: int = PREFILL_CHUNK) -> Iterator[int]:
    """Prefill `prompt` and yield greedy tokens; the cache must be empty."""
    tokens = torch.tensor(prompt)
    chunk = min(chunk, cache.max_chunk or chunk)
    hidden: torch.Tensor | None = None
    for start in range(0, len(prompt), chunk):
        hidden = model.forward_hidden(tokens[start : start + chunk], start, cache)
    assert hidden is not None
    pos = len(prompt)
    for _ in range(max_tokens):
        nxt = int(model.logits(hidden[-1]).argmax())
        yield nxt
        hidden = model.forward_hidden(torch.tensor([nxt]), pos, cache)
        pos += 1


def passkey(
    model: LlamaModel, tok: Tokenizer, lengths: Sequence[int], methods: dict[str, Callable[[int], AttentionCache]],
    *, depths: Sequence[float] = PASSKEY_DEPTHS, trials: int = 1, seed: int = 0, progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """`trials` cases per (length, depth), each with its own random 5-digit key; every method sees the
    same cases. `methods[name](prompt_len)` builds a fresh cache for a prompt of that many tokens.
    The keys come from one seeded stream in a fixed order, so trials=1 gives the same cases as before."""
    rng = random.Random(seed)
    cases: list[dict[str, Any]] = []
    for length, depth, _ in itertools.product(lengths, depths, range(trials)):
        key = f"{rng.randrange(10000, 100000)}"
        prompt = passkey_prompt(tok, length, depth, key)
        case: dict[str, Any] = {"length": length, "depth": depth, "key": key, "prompt_tokens": len(prompt)}
        for name, make in methods.items():
            out = tok.decode(list(greedy(model, make(len(prompt)), prompt, 8)))
            found = re.search(r"\d{5}", out.replace(" ", ""))
            case[name] = bool(found and found.group(0) == key)
            case[f"{name}_text"] = out
        cases.append(case)
        if progress:
            progress(f"passkey {length} depth {depth:.2f}: " + ", ".join(f"{n}={case[n]}" for n in methods))
    return cases


def evaluate(
    model_path: str | os.PathLike[str], text_path: str | os.PathLike[str], lengths: Sequence[int], cfg: HybridConfig, *,
    with_passkey: bool = False, passkey_lengths: Sequence[int] | None = None, passkey_depths: Sequence[float] = PASSKEY_DEPTHS,
    passkey_trials: int = 1, max_samples: int | None = None, decode_steps: int = 16, progress: Progress | None = None,
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
    full, hyb, win, n_samples = perplexity(
        model, tokens, lengths, cfg, max_samples=max_samples, decode_steps=decode_steps, progress=progress
    )
    longest = lengths[-1]
    if progress:
        progress(f"decode ms/token at {longest}: full {full.decode_ms_per_token:.1f}, hybrid {hyb.decode_ms_per_token:.1f}, "
                 f"window {win.decode_ms_per_token:.1f}")

    cases: list[dict[str, Any]] = []
    if with_passkey:
        plens = sorted(passkey_lengths or [n for n in lengths if n <= 8192])

        probes: dict[int, int] = {}  # the hybrid's bytes depend on the prompt length only

        def same_bytes_window(n: int) -> AttentionCache:
            if n not in probes:
                probes[n] = hybrid_bytes_at(model, cfg, n)
            return window_cache(mc, model.rope, window_for_bytes(mc, probes[n], cfg.n_sink), cfg.n_sink)

        methods: dict[str, Callable[[int], AttentionCache]] = {
            "full": lambda n: full_cache(mc),
            "hybrid": lambda n: hybrid_cache(mc, model.rope, cfg),
            "window": same_bytes_window,
        }
        cases = passkey(model, tok, plens, methods, depths=passkey_depths, trials=passkey_trials, progress=progress)
        for name, res in (("full", full), ("hybrid", hyb), ("window", win)):
            res.passkey_acc = sum(c[name] for c in cases) / len(cases)
            for n in plens:
                sub = [c[name] for c in cases if c["length"] == n]
                res.passkey_by_length[n] = sum(sub) / len(sub)

    return EvalResult(
        model=str(model_path),
        text=str(text_path),
        config=cfg,
        lengths=list(lengths),
        n_samples=n_samples,
        f16_full_bytes={n: n * mc.f16_kv_bytes_per_token for n in lengths},
        full=full,
        hybrid=hyb,
        window=win,
        passkey_cases=cases,
        seconds=time.perf_counter() - t_start,
    )


def hybrid_bytes_at(model: LlamaModel, cfg: HybridConfig, n_tokens: int) -> int:
    """Bytes the hybrid cache holds after n tokens. They depend on the count only, not on the
    tokens, so a run over zeros in the cache's own code gives the exact figure without the model."""
    mc = model.config
    cache = hybrid_cache(mc, model.rope, cfg)
    chunk = 512
    q = torch.zeros(mc.n_head, chunk, mc.head_dim)
    kv = torch.zeros(mc.n_head_kv, chunk, mc.head_dim)
    for start in range(0, n_tokens, chunk):
        n = min(chunk, n_tokens - start)
        for il in range(mc.n_layer):
            cache.attend(il, q[:, :n], kv[:, :n], kv[:, :n], start)
    return cache.bytes_held()


def _record_bytes(into: dict[int, int], cache: AttentionCache, n_tokens: int) -> None:
    """At each mark of a run: the bytes the cache holds after `n_tokens` tokens."""
    into[n_tokens] = cache.bytes_held()
