"""Development run: what 4-bit storage costs in perplexity on its own, on the second (development)
text, never the evaluation's. "q4-all", "q4-plain", "fp8": every head keeps every token (kind R, no
reach), with 32 sinks, a 64-token f16 window and older tokens in q4_0 (rotated or not) or FP8;
"q4-uniform": the same with every head's reach cut to fit 9.9% (the q4-uniform config). Bytes at 8K
against the f16 full cache. Results: q4-format-results.txt beside this file.

    nice -n 19 .venv/bin/python bench/experiments/q4-format-exp.py [--eval] [VARIANT ...]

--eval reads the evaluation text (Britannica) instead: only to report a config already chosen
(q4-uniform against the default's calibrated budgets on held-out text), never to choose one.
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from vrampilot.hybrid.cache import full_cache, hybrid_cache
from vrampilot.hybrid.config import CONFIGS, HybridConfig
from vrampilot.hybrid.evaluate import Tokenizer, run_tokens
from vrampilot.hybrid.model import LlamaModel
from vrampilot.paths import embedded_model_path, resources_dir

N = 8192
torch.set_num_threads(1)
path = embedded_model_path()
model = LlamaModel(path)
tok = Tokenizer(path)
args = sys.argv[1:]
held_out = "--eval" in args
args = [a for a in args if a != "--eval"]
name_of_text = "britannica-shakespeare.txt" if held_out else "milton-areopagitica.txt"
text = (resources_dir() / "hybrid" / name_of_text).read_text(encoding="utf-8")
ids = tok.encode(text)
print(f"{'eval' if held_out else 'dev'} text: {len(ids)} tokens; first {N}", flush=True)
sample = torch.tensor(ids[:N])
mc = model.config
variants = {
    "full": None,
    "q4-all": HybridConfig(n_sink=32, window=64, layout_cycle="R", storage="q4", rotate=True),
    "q4-uniform": CONFIGS["q4-uniform"],
    "q4-plain": HybridConfig(n_sink=32, window=64, layout_cycle="R", storage="q4", rotate=False),
    "fp8": HybridConfig(n_sink=32, window=64, layout_cycle="R", storage="fp8"),
}
for name in args or variants:
    cfg = variants[name]
    t0 = time.perf_counter()
    cache = full_cache(mc) if cfg is None else hybrid_cache(mc, model.rope, cfg.validate())
    losses, _ = run_tokens(model, cache, sample)
    share = cache.bytes_held() / (N * mc.f16_kv_bytes_per_token)
    print(f"{name} ppl@2K {losses[:2047].mean().exp():.3f} ppl@8K {losses.mean().exp():.3f} bytes {share:.1%} "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
