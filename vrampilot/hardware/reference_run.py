"""The speed probe's last step: the built-in model (SmolLM2-135M, shipped with the app) run for real.

Timing each kernel alone misses what a whole graph costs on this machine: a layer's small matrices
read cold from RAM one after another, the attention of grouped heads over a cache that grows with
the reply, the threads waiting for each other at every node. On the 2-core machine the project is
built on, decoding the built-in model took 1.6x the sum of its kernels' times. So the probe runs
the one model every installation has, as the engine does (llama-cpp-python's loop, f16 cache,
flash attention), and the planner compares that with its own prediction for the same steps
(planner/graph_factors.py):

- decode steps near the start of the cache and after a prompt of PREFILL_UBATCHES ubatches, at
  each thread count: the first give the cost of the weights and fixed costs, the
  difference the cost of attention over the cache (each depth in a context of its own, their
  passes timed in turn: see `_decode`);
- that prompt read ubatch by ubatch with all threads: reading prompts, and how it slows with the
  cells before each ubatch; its first ubatch again at each smaller thread count (the weights'
  share of reading prompts at that count). Four ubatches, so that the last reads after 1536
  cells: a ubatch's attention over the cache grows by a tenth of its time per 512 cells, so two
  ubatches (after 0 and 512 cells) could not tell it from the run's noise, and the kernels' rate
  then priced 4K-token prompts 1.1-1.3x too fast (bench/experiments/prefill-depth-exp.py: each ubatch of a 4096-token
  prompt slowed by 1.3-2x what the kernels' rate says, for every model at 1 and 2 threads).

About 15 seconds on 2 cores (most of it the 2048-token prompt, read twice), in the background at first
start.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from vrampilot.hardware.measured import ReferenceDecode, ReferencePrefill, ReferenceRun

N_UBATCH = 512  # what plans use unless memory is short: matrix kernels run faster on larger ones
PREFILL_UBATCHES = 4  # the prompt: 2048 tokens, read as ubatches after 0, 512, 1024 and 1536 cells
N_CTX = N_UBATCH * PREFILL_UBATCHES + 256  # the prompt, the deep decode steps, padded as llama.cpp pads
# The prompt is read this many times, back to back, each ubatch keeping the mean of its passes:
# this machine's speed moved 20-30% between seconds (three probes a minute apart read the prompt's
# attention as x0.89, x1.24 and x1.73 what the kernels say from one pass each; four with two passes
# back to back, x1.28-1.42). Not their fastest, which it kept until a Zen 4 VM whose speed swung
# more: the kernels' figures are each their faster pass, so a graph factor from the run's fastest
# priced prompts at the machine's fastest moments, where decode steps (the median of their passes)
# priced the usual pace; there the built-in model's own 2K-token prompts at 2 threads came out
# 1.12-1.47x too fast before replies in six runs of bench/speed.py (median 1.17), its generating
# 0.84-1.23 (bench/experiments/issue19-speed-genoa*).
PREFILL_PASSES = 2
DECODE_STEPS = 8  # timed per pass, depth and thread count (the first step is not timed)
# Timed passes per depth and thread count (after one untimed), each from the same cache; the median
# step over them is kept, so that a moment when the machine is slower (a VM's neighbours, a
# frequency step) counts once.
PASSES = 3
KV_TYPE = "f16"
# The engine's default sampling (engine/sampling.py): the sampler chain every reply pays per token.
ENGINE_SAMPLING = {"temp": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1}


def _prompt(n_vocab: int, n: int) -> list[int]:
    """n token ids spread over the vocabulary, the same every run (their text does not matter: the
    time of a step does not depend on which tokens it reads)."""
    lo, span = min(1000, n_vocab // 4), max(1, n_vocab - 2 * min(1000, n_vocab // 4))
    return [lo + (i * 7919) % span for i in range(n)]


def decode_step_times(llm: object, tokens: list[int], n_steps: int) -> list[float]:
    """The times of n_steps steps generating after `tokens` through the engine's per-token loop
    (llama-cpp-python's generate: sample, then decode); the cache keeps the longest prefix it
    already holds, as a chat turn does. The first token, which reads the prompt, is not timed."""
    times: list[float] = []
    last = 0.0
    for n, _token in enumerate(llm.generate(tokens, **ENGINE_SAMPLING)):  # type: ignore[attr-defined]
        now = time.perf_counter()
        if n:
            times.append(now - last)
        last = now
        if n >= n_steps:
            break
    return times


def _decode(llama_cpp: object, depths: Sequence[tuple[object, list[int], bool]], threads: Sequence[int],
            most: int) -> list[ReferenceDecode]:  # fmt: skip
    """Decode steps at each depth: `depths` holds (a context, the tokens its steps follow, whether
    each pass starts from an empty cache). The depths' passes are timed in turn (shallow, deep,
    shallow, ...), each depth in a context of its own that keeps its cache: the attention factor
    comes from the difference of the two depths, and timed minutes or seconds apart that difference
    carried the machine's drift (fitted from one probe to the next anywhere from x0.58 to x2.68 on a
    VM whose speed moved 20-30% between seconds); taken in turn, a slow moment weighs on both."""
    steps: dict[tuple[int, int], list[float]] = {}
    for t in threads:
        # One thread count at a time, as a chat runs: switching every few steps made the steps
        # after a switch up to half as slow again here, which no reply sees.
        for llm, _, _ in depths:
            llama_cpp.llama_set_n_threads(llm.ctx, t, most)  # type: ignore[attr-defined]
        # One pass of each untimed first: the steps right after another thread count's work (the
        # prompt, read with every thread) ran slower here, 1 thread after 1030 tokens 32-35 ms a step
        # against 24-30 ms once warm (bench/experiments/issue19-reference-warmup.txt), which no
        # chat sees past its first tokens and which made 1-thread plans look a third slower.
        for n in range(PASSES + 1):
            for i, (llm, tokens, reset) in enumerate(depths):
                if reset:
                    llm.reset()  # type: ignore[attr-defined]
                times = decode_step_times(llm, tokens, DECODE_STEPS)
                if n:
                    steps.setdefault((i, t), []).extend(times)
    # Rounded as stored, so a probe read back from the record equals the one measured.
    return [ReferenceDecode(t, len(tokens) + 1 + DECODE_STEPS // 2, round(statistics.median(steps[i, t]), 7))
            for i, (_, tokens, _) in enumerate(depths) for t in threads]  # fmt: skip


def _prompt_times(llm: object, ubatches: list[list[int]]) -> list[float]:
    """Seconds each ubatch took, read in order from an empty cache, PREFILL_PASSES times: the mean
    of its passes (see PREFILL_PASSES), rounded as stored."""
    passes: list[list[float]] = [[] for _ in ubatches]
    for _ in range(PREFILL_PASSES):
        llm.reset()  # type: ignore[attr-defined]  # eval drops the cache from the reset position on
        for times, ubatch in zip(passes, ubatches, strict=True):
            t0 = time.perf_counter()
            llm.eval(ubatch)  # type: ignore[attr-defined]
            times.append(time.perf_counter() - t0)
    return [round(statistics.mean(times), 6) for times in passes]


def measure_reference(model: Path, threads: Sequence[int]) -> ReferenceRun:
    """Run the reference model (see the module's text); raises what llama.cpp raises."""
    from vrampilot.llamacpp import load
    from vrampilot.llamacpp.lock import LOG_LOCK

    llama_cpp = load()
    most = max(threads)
    params = {"n_ctx": N_CTX, "n_batch": N_UBATCH, "n_ubatch": N_UBATCH, "n_threads": most, "n_threads_batch": most,
              "flash_attn": True, "verbose": False}  # fmt: skip
    with LOG_LOCK:  # loading logs; the planner's dry runs read that log
        llm = llama_cpp.Llama(str(model), **params)
    shallow = None
    try:
        with LOG_LOCK:
            # The shallow steps' own context (the weights are mapped once, its cache is 50 MB), so
            # that they can be timed in turn with the deep ones without reading the prompt again.
            shallow = llama_cpp.Llama(str(model), **params)
        prompt = _prompt(llm.n_vocab(), N_UBATCH * PREFILL_UBATCHES + 1)
        llama_cpp.llama_set_n_threads(llm.ctx, most, most)
        ubatches = [prompt[i * N_UBATCH : (i + 1) * N_UBATCH] for i in range(PREFILL_UBATCHES)]
        prefill = [ReferencePrefill(most, i * N_UBATCH, N_UBATCH, t) for i, t in enumerate(_prompt_times(llm, ubatches))]
        # The first ubatch again at each smaller thread count, in the shallow context (the deep one
        # keeps the whole prompt for its steps): what a graph costs beyond its kernels is not the
        # same at every count, so the prompt's factor at all threads cannot stand for one thread.
        # On a Zen 4 VM the built-in model's first ubatch took 1.2-1.4x its kernels' time at 1
        # thread and 0.9-1.2x at 2, and two runs of bench/speed.py priced its 1-thread prompts
        # 1.33 and 1.55x too fast with the 2-thread factor (bench/experiments/issue19-speed-genoa*).
        fewer = []
        for t in sorted(set(threads) - {most}):
            llama_cpp.llama_set_n_threads(shallow.ctx, t, t)
            fewer.append(ReferencePrefill(t, 0, N_UBATCH, _prompt_times(shallow, ubatches[:1])[0]))
        prefill = [*fewer, *prefill]
        # Deep: the whole prompt is cached but its last token: one token read, then the steps.
        decode = _decode(llama_cpp, [(shallow, prompt[:4], True), (llm, prompt, False)], threads, most)
    finally:
        if shallow is not None:
            shallow.close()
        llm.close()
    return ReferenceRun(
        model_name=model.name,
        model_bytes=model.stat().st_size,
        n_ctx=N_CTX,
        n_ubatch=N_UBATCH,
        kv_type=KV_TYPE,
        decode=tuple(decode),
        prefill=tuple(prefill),
    )
