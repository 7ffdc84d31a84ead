"""Development runs: how much of HCA's log(m) bias `retrieval-broad` needs (kept as run).

Scales the bias of every H/C layer plan by each factor given (wrapping LayerPlan.for_kind, which
is fine for an experiment and nothing else), then prints the log-loss of each answer token in the
two 8K development passkey cases of first-token-exp.py (key at 75% depth, seeds 11 and 12) and the
perplexity on the evaluation text at 2K/4K/8K. Results: bias-scale-results.txt beside this file.

    .venv/bin/python bench/experiments/bias-scale-exp.py 0.5,0.75,0.9,1
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import vrampilot.hybrid.cache as hc
from vrampilot.hybrid.config import HybridConfig, default_text_path, get_config
from vrampilot.hybrid.evaluate import Tokenizer, passkey_prompt, run_tokens
from vrampilot.hybrid.model import LlamaModel
from vrampilot.paths import embedded_model_path

_for_kind = hc.LayerPlan.for_kind
SCALE = [1.0]


def _scaled(kind: hc.LayerKind, cfg: HybridConfig) -> hc.LayerPlan:
    plan = _for_kind(kind, cfg)
    return replace(plan, merge_bias=plan.merge_bias * SCALE[0])


def main() -> None:
    hc.LayerPlan.for_kind = staticmethod(_scaled)  # type: ignore[method-assign]
    torch.set_num_threads(2)
    model = LlamaModel(embedded_model_path())
    mc = model.config
    tok = Tokenizer(embedded_model_path())
    text = torch.tensor(tok.encode(Path(default_text_path()).read_text())[:8192])
    cfg = get_config("retrieval-broad")
    cases = []
    for seed in (11, 12):
        key = f"{random.Random(seed).randrange(10000, 100000)}"
        cases.append((key, passkey_prompt(tok, 8192, 0.75, key)))
    for scale in (float(x) for x in sys.argv[1].split(",")):
        SCALE[0] = scale
        for key, prompt in cases:
            answer = tok.encode(" " + key)
            tokens = torch.tensor(prompt + answer)
            p = len(prompt)
            cache = hc.hybrid_cache(mc, model.rope, cfg)
            hidden = torch.cat([model.forward_hidden(tokens[s : s + 256], s, cache) for s in range(0, len(tokens), 256)])
            with torch.inference_mode():
                lp = torch.log_softmax(model.logits(hidden[p - 1 : p + len(answer) - 1]), -1)
            target = tokens[p:]
            nll = -lp[torch.arange(len(answer)), target]
            print(scale, key, [round(float(x), 2) for x in nll], bool((lp.argmax(-1) == target).all()), flush=True)
        losses, _ = run_tokens(model, hc.hybrid_cache(mc, model.rope, cfg), text, marks=[2048, 4096, 8192])
        print(scale, "ppl", {n: round(math.exp(float(losses[: n - 1].mean())), 3) for n in (2048, 4096, 8192)}, flush=True)


if __name__ == "__main__":
    main()
