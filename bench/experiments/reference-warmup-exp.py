"""The built-in model's decode steps 1030 tokens deep (reference_run.py's shapes), right after the
prompt was read with 2 threads or after the other thread count's steps, with and without an untimed
pass after each switch of thread count.

    .venv/bin/python bench/experiments/reference-warmup-exp.py ROUNDS

Results: issue19-reference-warmup.txt.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vrampilot.hardware import reference_run as rr
from vrampilot.llamacpp import load
from vrampilot.paths import embedded_model_path


def main() -> None:
    llama_cpp = load()
    path = embedded_model_path()
    assert path is not None
    llm = llama_cpp.Llama(str(path), n_ctx=rr.N_CTX, n_batch=512, n_ubatch=512, n_threads=2, n_threads_batch=2,
                          flash_attn=True, verbose=False)  # fmt: skip
    prompt = rr._prompt(llm.n_vocab(), 1025)

    def deep(threads: int, warm: bool) -> float:
        llama_cpp.llama_set_n_threads(llm.ctx, threads, 2)
        if warm:
            rr.decode_step_times(llm, prompt, 8)
        steps: list[float] = []
        for _ in range(3):
            steps += rr.decode_step_times(llm, prompt, 8)
        return statistics.median(steps) * 1000

    def read_prompt() -> None:
        llm.reset()
        llama_cpp.llama_set_n_threads(llm.ctx, 2, 2)
        for i in range(2):
            llm.eval(prompt[i * 512 : (i + 1) * 512])

    for _ in range(int(sys.argv[1])):
        for warm in (False, True):
            read_prompt()
            a, b = deep(1, warm), deep(2, warm)
            read_prompt()
            c, d = deep(2, warm), deep(1, warm)
            print(f"warm={warm}: after prefill 1T {a:.2f} then 2T {b:.2f} | after prefill 2T {c:.2f} then 1T {d:.2f} ms",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
