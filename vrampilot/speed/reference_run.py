"""The speed probe's last step: the built-in model (SmolLM2-135M, shipped with the app) run for real.

Timing each kernel alone misses what a whole graph costs on this machine: a layer's small matrices
read cold from RAM one after another, the attention of grouped heads over a cache that grows with
the reply, the threads waiting for each other at every node: a real step can take well over the sum
of its kernels' times (docs/speed-model.md, "Graph factors"). So the probe runs
the one model every installation has, as the engine does (llama-cpp-python's loop, f16 cache,
flash attention), and the planner compares that with its own prediction for the same steps
(planner/speed_model/graph_factors.py):

- decode steps near the start of the cache and after a prompt of PREFILL_UBATCHES ubatches, at
  each thread count: the first give the cost of the weights and fixed costs, the
  difference the cost of attention over the cache (each depth in a context of its own, their
  passes timed in turn: see `_decode`);
- that prompt read ubatch by ubatch with all threads: reading prompts, and how it slows with the
  cells before each ubatch; its first ubatch again at each smaller thread count (the weights'
  share of reading prompts at that count). Four ubatches, so that the last reads after 1536
  cells: from two ubatches the growth of a ubatch's attention with the cells before it cannot be
  told from the run's noise (docs/speed-model.md, decision log, "A prompt's attention with depth").

Most of its time is the 2048-token prompt, read twice (READINGS); it runs in the background at
first start.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from vrampilot.speed.measured import ReferenceDecode, ReferencePrefill, ReferenceRun

if TYPE_CHECKING:
    from llama_cpp import Llama

N_UBATCH = 512  # what plans use unless memory is short: matrix kernels run faster on larger ones
PREFILL_UBATCHES = 4  # the prompt: 2048 tokens, read as ubatches after 0, 512, 1024 and 1536 cells
N_CTX = N_UBATCH * PREFILL_UBATCHES + 256  # the prompt, the deep decode steps, padded as llama.cpp pads
# The run is read this many times (`ReferenceSession.read`), the probe's second pass of the kernels
# between the readings, and each step and ubatch keeps the mean of its readings: a machine's speed
# can move between seconds, and one reading carries its moment into every model's graph factor.
# Not the fastest reading (the kernels' figures are each their faster pass, so a factor from the
# run's fastest prices prompts at the machine's fastest moments, where replies run at its usual
# pace), and not back to back (neighbouring readings share a moment; readings apart, kernels
# running between them, do not). Method and error ranges: docs/speed-model.md, decision log, "The
# built-in model's run: readings, warm-up, layout".
READINGS = 2
DECODE_STEPS = 8  # timed per pass, depth and thread count (the first step is not timed)
# Timed passes per reading, depth and thread count (after one untimed), each from the same cache;
# the median step over them is the reading's, so that a moment when the machine is slower (a VM's
# neighbours, a frequency step) counts once.
PASSES = 2
KV_TYPE = "f16"
# The engine's default sampling (engine/sampling.py): the sampler chain every reply pays per token.
ENGINE_SAMPLING = {"temp": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1}


def _prompt(n_vocab: int, n: int) -> list[int]:
    """n token ids spread over the vocabulary, the same every run (their text does not matter: the
    time of a step does not depend on which tokens it reads)."""
    lo, span = min(1000, n_vocab // 4), max(1, n_vocab - 2 * min(1000, n_vocab // 4))
    return [lo + (i * 7919) % span for i in range(n)]


def decode_step_times(llm: Llama, tokens: list[int], n_steps: int) -> list[float]:
    """The times of n_steps steps generating after `tokens` through the engine's per-token loop
    (llama-cpp-python's generate: sample, then decode); the cache keeps the longest prefix it
    already holds, as a chat turn does. The first token, which reads the prompt, is not timed."""
    times: list[float] = []
    last = 0.0
    for n, _token in enumerate(llm.generate(tokens, **ENGINE_SAMPLING)):  # type: ignore[arg-type]  # a dict of float sampling keywords
        now = time.perf_counter()
        if n:
            times.append(now - last)
        last = now
        if n >= n_steps:
            break
    return times


def _no_check() -> None:
    return None


def _decode(
    llama_cpp: ModuleType,
    depths: Sequence[tuple[Llama, list[int], bool]],
    threads: Sequence[int],
    most: int,
    check: Callable[[], None] = _no_check,
) -> dict[tuple[int, int], float]:
    """The median decode step, in seconds, per (thread count, depth): `depths` holds (a context, the
    tokens its steps follow, whether each pass starts from an empty cache). The depths' passes are timed in turn (shallow, deep,
    shallow, ...), each depth in a context of its own that keeps its cache: the attention factor
    comes from the difference of the two depths, and timed minutes or seconds apart that difference
    carries the machine's drift; taken in turn, a slow moment weighs on both (docs/speed-model.md,
    decision log, "The built-in model's run: readings, warm-up, layout")."""
    steps: dict[tuple[int, int], list[float]] = {}
    for t in threads:
        # One thread count at a time, as a chat runs: switching every few steps slows the steps
        # after a switch, which no reply sees.
        for llm, _, _ in depths:
            llama_cpp.llama_set_n_threads(llm.ctx, t, most)
        # One pass of each untimed first: the steps right after another thread count's work (the
        # prompt, read with every thread) run slower than warm ones, which no chat sees past its
        # first tokens (docs/speed-model.md, decision log, "The built-in model's run: readings,
        # warm-up, layout").
        for n in range(PASSES + 1):
            for i, (llm, tokens, reset) in enumerate(depths):
                check()
                if reset:
                    llm.reset()
                times = decode_step_times(llm, tokens, DECODE_STEPS)
                if n:
                    steps.setdefault((i, t), []).extend(times)
    return {
        (t, len(tokens) + 1 + DECODE_STEPS // 2): statistics.median(steps[i, t])
        for i, (_, tokens, _) in enumerate(depths)
        for t in threads
    }


class ReferenceSession:
    """The built-in model loaded for the probe's run (see the module's text), read READINGS times
    with the probe's other work between the readings; `result` gives the run. Raises what llama.cpp
    raises; close it (or use it as a context manager) to free both contexts."""

    def __init__(self, model: Path, threads: Sequence[int]) -> None:
        from vrampilot.llamacpp import LOG_LOCK, load

        self._llama_cpp = load()
        self.model = model
        self.threads = sorted(set(threads))
        self.most = max(self.threads)
        # The CPU's run: llama.cpp would otherwise send a prompt's products to a GPU (op_offload) with
        # no layer on it, and the probe would time the GPU (minutes on lavapipe) as the CPU's.
        params = {
            "n_ctx": N_CTX,
            "n_batch": N_UBATCH,
            "n_ubatch": N_UBATCH,
            "n_threads": self.most,
            "n_threads_batch": self.most,
            "flash_attn": True,
            "verbose": False,
            "n_gpu_layers": 0,
            "op_offload": False,
        }
        with LOG_LOCK:  # loading logs; the planner's dry runs read that log
            self._deep = self._llama_cpp.Llama(str(model), **params)
        try:
            with LOG_LOCK:
                # The shallow steps' own context (the weights are mapped once, its cache is 50 MB),
                # so that they can be timed in turn with the deep ones without reading the prompt
                # again.
                self._shallow = self._llama_cpp.Llama(str(model), **params)
        except BaseException:
            self._deep.close()
            raise
        self._prompt = _prompt(self._deep.n_vocab(), N_UBATCH * PREFILL_UBATCHES + 1)
        self._ubatches = [self._prompt[i * N_UBATCH : (i + 1) * N_UBATCH] for i in range(PREFILL_UBATCHES)]
        self._prefill_s: dict[tuple[int, int], list[float]] = {}  # (threads, n_past): seconds per reading
        self._step_s: dict[tuple[int, int], list[float]] = {}  # (threads, depth): median step per reading
        self.readings = 0

    def __enter__(self) -> ReferenceSession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._shallow.close()
        self._deep.close()

    def _ubatch_s(self, llm: Llama, ubatch: list[int]) -> float:
        t0 = time.perf_counter()
        llm.eval(ubatch)
        return time.perf_counter() - t0

    def read(self, check: Callable[[], None] = _no_check) -> None:
        """One reading: the prompt ubatch by ubatch with all threads from an empty cache, its first
        ubatch at each smaller count, then the decode steps at both depths. `check` runs between
        two pieces of work (a ubatch, a pass of steps) and raises to stop: a reading takes seconds,
        many on a busy machine, and a window closing must not wait for it (nor outlive it)."""
        llama_cpp = self._llama_cpp
        llama_cpp.llama_set_n_threads(self._deep.ctx, self.most, self.most)
        self._deep.reset()  # eval drops the cache from the reset position on
        for i, ubatch in enumerate(self._ubatches):
            check()
            self._prefill_s.setdefault((self.most, i * N_UBATCH), []).append(self._ubatch_s(self._deep, ubatch))
        # The first ubatch again at each smaller thread count, in the shallow context (the deep one
        # keeps the whole prompt for its steps): what a graph costs beyond its kernels is not the
        # same at every count, so the prompt's factor at all threads cannot stand for one thread
        # (docs/speed-model.md, decision log, "The built-in model's run: readings, warm-up, layout").
        for t in self.threads:
            if t != self.most:
                check()
                llama_cpp.llama_set_n_threads(self._shallow.ctx, t, t)
                self._shallow.reset()
                self._prefill_s.setdefault((t, 0), []).append(self._ubatch_s(self._shallow, self._ubatches[0]))
        # Deep: the whole prompt is cached but its last token: one token read, then the steps.
        depths = [(self._shallow, self._prompt[:4], True), (self._deep, self._prompt, False)]
        for key, step_s in _decode(llama_cpp, depths, self.threads, self.most, check).items():
            self._step_s.setdefault(key, []).append(step_s)
        self.readings += 1

    def result(self) -> ReferenceRun:
        """The run: each step and ubatch the mean of its readings, rounded as stored (so a probe read
        back from the record equals the one measured)."""
        if not self.readings:
            raise ValueError("the reference run was not read")
        fewer = sorted(k for k in self._prefill_s if k[0] != self.most)
        most = sorted(k for k in self._prefill_s if k[0] == self.most)
        by_depth = sorted(self._step_s, key=lambda k: (k[1], k[0]))
        decode = tuple(
            ReferenceDecode(t, depth, round(statistics.mean(self._step_s[t, depth]), 7)) for t, depth in by_depth
        )
        prefill = tuple(
            ReferencePrefill(t, n_past, N_UBATCH, round(statistics.mean(self._prefill_s[t, n_past]), 6))
            for t, n_past in (*fewer, *most)
        )
        return ReferenceRun(
            model_name=self.model.name,
            model_bytes=self.model.stat().st_size,
            n_ctx=N_CTX,
            n_ubatch=N_UBATCH,
            kv_type=KV_TYPE,
            decode=decode,
            prefill=prefill,
        )
