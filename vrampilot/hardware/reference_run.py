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
  difference the cost of attention over the cache;
- that prompt read ubatch by ubatch with all threads: reading prompts, and how it slows with the
  cells before each ubatch. Four ubatches, so that the last reads after 1536 cells: a ubatch's
  attention over the cache grows by a tenth of its time per 512 cells, so two ubatches (after 0
  and 512 cells) could not tell it from the run's noise, and the kernels' rate then priced 4K-token
  prompts 1.1-1.3x too fast (bench/experiments/prefill-depth-exp.py: each ubatch of a 4096-token
  prompt slowed by 1.3-2x what the kernels' rate says, for every model at 1 and 2 threads).

10-18 seconds on 2 cores (most of it the 2048-token prompt, read twice), in the background at first start.
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
# The prompt is read this many times, each ubatch keeping its fastest: this machine's speed moved
# 20-30% between seconds (three probes a minute apart read the 1536-cell ubatch's attention as
# x0.89, x1.24 and x1.73 what the kernels say from one pass each).
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


def _decode(llama_cpp: object, llm: object, tokens: list[int], threads: Sequence[int], most: int,
            reset: bool) -> list[ReferenceDecode]:  # fmt: skip
    out = []
    for t in threads:
        # One thread count at a time, as a chat runs: switching every few steps made the steps
        # after a switch up to half as slow again here, which no reply sees.
        llama_cpp.llama_set_n_threads(llm.ctx, t, most)  # type: ignore[attr-defined]
        steps: list[float] = []
        # One pass untimed first: the steps right after another thread count's work (the prompt,
        # read with every thread) ran slower here, 1 thread after 1030 tokens 32-35 ms a step
        # against 24-30 ms once warm (bench/experiments/issue19-reference-warmup.txt), which no
        # chat sees past its first tokens and which made 1-thread plans look a third slower.
        for n in range(PASSES + 1):
            if reset:
                llm.reset()  # type: ignore[attr-defined]
            times = decode_step_times(llm, tokens, DECODE_STEPS)
            if n:
                steps += times
        # Rounded as stored, so a probe read back from the record equals the one measured.
        out.append(ReferenceDecode(t, len(tokens) + 1 + DECODE_STEPS // 2, round(statistics.median(steps), 7)))
    return out


def measure_reference(model: Path, threads: Sequence[int]) -> ReferenceRun:
    """Run the reference model (see the module's text); raises what llama.cpp raises."""
    from vrampilot.llamacpp import load
    from vrampilot.llamacpp.lock import LOG_LOCK

    llama_cpp = load()
    most = max(threads)
    with LOG_LOCK:  # loading logs; the planner's dry runs read that log
        llm = llama_cpp.Llama(str(model), n_ctx=N_CTX, n_batch=N_UBATCH, n_ubatch=N_UBATCH, n_threads=most,
                              n_threads_batch=most, flash_attn=True, verbose=False)  # fmt: skip
    try:
        prompt = _prompt(llm.n_vocab(), N_UBATCH * PREFILL_UBATCHES + 1)
        best = [float("inf")] * PREFILL_UBATCHES

        def read_prompt() -> None:
            llama_cpp.llama_set_n_threads(llm.ctx, most, most)
            llm.reset()  # eval drops the cache from the reset position on: each pass reads from 0
            for i in range(PREFILL_UBATCHES):
                t0 = time.perf_counter()
                llm.eval(prompt[i * N_UBATCH : (i + 1) * N_UBATCH])
                best[i] = min(best[i], time.perf_counter() - t0)

        # The attention factor comes from the difference of the shallow and the deep steps, so they
        # are timed as close together as the prompt between them allows: the shallow ones between
        # the prompt's two passes (PREFILL_PASSES), the deep ones right after the second.
        read_prompt()
        decode = _decode(llama_cpp, llm, prompt[:4], threads, most, reset=True)
        for _ in range(PREFILL_PASSES - 1):
            read_prompt()
        prefill = [ReferencePrefill(most, i * N_UBATCH, N_UBATCH, round(t, 6)) for i, t in enumerate(best)]
        # The whole prompt is cached but its last token: one token read, then the steps.
        decode += _decode(llama_cpp, llm, prompt, threads, most, reset=False)
    finally:
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
