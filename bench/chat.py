"""Decode speed of the app's engine against a bare llama-cpp-python loop, and follow-up TTFT.

Both sides load the same GGUF with the same llama.cpp arguments (vrampilot.export.llama_cpp_kwargs of
one plan), get the same prompt tokens and the same greedy sampling, and run interleaved in the
same process, so a busy machine slows both alike. The bare loop is what any streaming caller
writes: `Llama.generate` plus per-token detokenization. Reported: median decode tokens/s of each
and their ratio (target >= 0.97), then the engine's time to first token for a follow-up turn
against the first turn of a conversation with a long system prompt (KV prefix reuse).

    .venv/bin/python bench/chat.py [MODEL] [--rounds 5] [--tokens 128] [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    import llama_cpp

from vrampilot import llamacpp  # noqa: E402
from vrampilot.commands.common import resolve_model  # noqa: E402
from vrampilot.engine import Engine, Message, SamplingParams  # noqa: E402
from vrampilot.export import llama_cpp_kwargs  # noqa: E402
from vrampilot.gguf import load_model_spec  # noqa: E402
from vrampilot.planner.plan import Pins, Plan  # noqa: E402
from vrampilot.planner.search.choose import plan  # noqa: E402
from vrampilot.planner.target import TargetRequest, resolve_target  # noqa: E402
from vrampilot.speed import detect_measured_machine  # noqa: E402

llama_cpp = llamacpp.load()

PROMPT = "Write a detailed story about a lighthouse keeper who finds a message in a bottle."
SYSTEM = " ".join(
    f"Rule {i}: answer clearly, cite the facts you rely on, prefer short sentences, and say when unsure."
    for i in range(1, 40)
)


def bare_decode(llm: llama_cpp.Llama, tokens: list[int], n_tokens: int, s: SamplingParams) -> tuple[float, int]:
    """Decode tokens/s of a plain generate loop, timed like the engine: first token to last."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    llm.set_seed(s.seed if s.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED)
    llm.reset()  # a fresh prompt each round, as the engine gets (it re-evaluates one token)
    count = 0
    t_first = t_last = 0.0
    out = []
    for tok in llm.generate(
        tokens, temp=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p, repeat_penalty=s.repeat_penalty
    ):
        t_last = time.perf_counter()
        if count == 0:
            t_first = t_last
        if llama_cpp.llama_vocab_is_eog(vocab, tok):
            break
        out.append(llm.detokenize([tok]))
        count += 1
        if count >= n_tokens:
            break
    return ((count - 1) / (t_last - t_first) if count > 1 and t_last > t_first else 0.0), count


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = load_model_spec(resolve_model(args.model))
    pins = Pins(n_ctx=args.ctx, n_threads=args.threads, n_threads_batch=args.threads)
    found = detect_measured_machine()
    p: Plan = plan(spec, resolve_target(TargetRequest(), found.machine, found.speed), pins)
    sampling = SamplingParams(
        temperature=0.0, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, max_tokens=args.tokens, seed=1
    )
    engine = Engine()
    engine.load(p)
    bare = llama_cpp.Llama(str(spec.path), **llama_cpp_kwargs(p.settings), verbose=False)
    messages = [Message("user", PROMPT)]
    tokens = engine.tokenize_prompt(messages)

    engine_tps: list[float] = []
    bare_tps: list[float] = []
    engine_n = bare_n = 0
    # Warm-up both (first graph build, page cache), then interleave.
    engine.chat(messages, sampling.with_(max_tokens=8))
    bare_decode(bare, tokens, 8, sampling)
    for i in range(args.rounds):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for side in order:
            if side == 0:
                r = engine.chat(messages, sampling)
                engine_tps.append(r.stats.decode_tps)
                engine_n = r.stats.completion_tokens
            else:
                tps, bare_n = bare_decode(bare, tokens, args.tokens, sampling)
                bare_tps.append(tps)
    bare.close()
    engine.unload()

    # Follow-up TTFT: a conversation with a long system prompt, then one more question.
    engine = Engine()
    engine.load(p)
    first_msgs = [Message("system", SYSTEM), Message("user", "What is a lighthouse?")]
    short = sampling.with_(max_tokens=32)
    r1 = engine.chat(first_msgs, short)
    follow = [*first_msgs, Message("assistant", r1.text), Message("user", "Who keeps it?")]
    r2 = engine.chat(follow, short)
    engine.unload()

    e_med, b_med = statistics.median(engine_tps), statistics.median(bare_tps)
    return {
        "model": str(spec.path),
        "settings": p.settings.to_dict(),
        "rounds": args.rounds,
        "tokens": {"engine": engine_n, "bare": bare_n},
        "engine_decode_tps": [round(x, 2) for x in engine_tps],
        "bare_decode_tps": [round(x, 2) for x in bare_tps],
        "engine_decode_tps_median": round(e_med, 2),
        "bare_decode_tps_median": round(b_med, 2),
        "ratio": round(e_med / b_med, 4) if b_med else 0.0,
        "first_turn": {
            "prompt_tokens": r1.stats.prompt_tokens,
            "evaluated_tokens": r1.stats.evaluated_tokens,
            "ttft_s": round(r1.stats.ttft_s, 4),
        },
        "follow_up": {
            "prompt_tokens": r2.stats.prompt_tokens,
            "evaluated_tokens": r2.stats.evaluated_tokens,
            "ttft_s": round(r2.stats.ttft_s, 4),
        },
        "follow_up_ttft_ratio": round(r2.stats.ttft_s / r1.stats.ttft_s, 4) if r1.stats.ttft_s else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", help="GGUF file (default: the embedded model)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128, help="tokens to decode per round")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, help="pin generation and prompt threads (default: the plan's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = run(args)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    s = res["settings"]
    print(
        f"model: {Path(res['model']).name}  ctx {s['n_ctx']}  threads {s['n_threads']}/{s['n_threads_batch']}  "
        f"ngl {s['n_gpu_layers']}  rounds {res['rounds']} (interleaved)"
    )
    print(
        f"decode tokens/s   engine {res['engine_decode_tps_median']:8.2f}   bare llama-cpp-python "
        f"{res['bare_decode_tps_median']:8.2f}   ratio {res['ratio']:.3f} (target >= 0.97)"
    )
    print(f"  per round engine {res['engine_decode_tps']}")
    print(f"  per round bare   {res['bare_decode_tps']}")
    f, u = res["first_turn"], res["follow_up"]
    print(
        f"TTFT first turn   {f['ttft_s'] * 1000:8.1f} ms  ({f['evaluated_tokens']} of {f['prompt_tokens']} prompt "
        "tokens evaluated)"
    )
    print(
        f"TTFT follow-up    {u['ttft_s'] * 1000:8.1f} ms  ({u['evaluated_tokens']} of {u['prompt_tokens']} prompt "
        f"tokens evaluated)  = {res['follow_up_ttft_ratio']:.3f} x first turn"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
