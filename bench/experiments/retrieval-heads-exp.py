"""The development runs behind the README's "What it took" table for the hybrid cache's retrieval
heads (results: retrieval-heads-results.jsonl beside this file). Kept as it was run, for the
record; bench/hybrid.py is the evaluation. Needs a calibration file from bench/hybrid_calibrate.py
(--calfile) and writes its results to --results.

    .venv/bin/python bench/experiments/retrieval-heads-exp.py --k 8 --kind R --sink 32 --W 680 --ppl --pk 8192
"""

import argparse
import json
import math
import random
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from vrampilot.hybrid.cache import full_cache, hybrid_cache, window_cache
from vrampilot.hybrid.config import HybridConfig, default_text_path
from vrampilot.hybrid.evaluate import Tokenizer, greedy, hybrid_bytes_at, passkey_prompt, run_tokens
from vrampilot.hybrid.model import LlamaModel
from vrampilot.paths import embedded_model_path

RANK: list[tuple[int, int]] = []  # the calibration's KV-head ranking, best first (--calfile)
N = 8192
SINK = 4
F16 = N * 23040


def head_bytes(kind, W, S=None, n=N):
    S = SINK if S is None else S
    if kind == "F":
        return n * 256
    m = 128 if kind == "H" else (16 if kind == "R" else 1)
    nb = max(0, (n - W - S) // m)
    tail = n - S - nb * m
    per = 132 if kind in "HR" else 0
    ent = nb * per if kind == "H" else nb * m * per
    return (S + tail) * 256 + ent


def fit_window(k, rkind, base="H", target=0.148):
    best = None
    for W in range(16, 4000, 1):
        b = k * head_bytes(rkind, W) + (90 - k) * head_bytes(base, W)
        if b <= target * F16:
            best = W
    return best


def make_cfg(k, rkind, W, base="H", heads=None):
    heads = tuple(sorted(heads if heads is not None else RANK[:k]))
    return HybridConfig(
        name=f"ret{k}{rkind}-W{W}-S{SINK}",
        window=W,
        n_sink=SINK,
        layout_cycle=base,
        merge_bias=False,
        retrieval_heads=heads,
        retrieval_kind=rkind,
    ).validate()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--kind", default="F")
    ap.add_argument("--W", type=int)
    ap.add_argument("--base", default="H")
    ap.add_argument("--ppl", action="store_true")
    ap.add_argument("--nll", default="")
    ap.add_argument("--pk", default="")  # lengths
    ap.add_argument("--window", type=int, help="plain window of W tokens instead")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--depths", default="0,0.25,0.5,0.75,1")
    ap.add_argument("--nobytes", action="store_true")
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--only", default="")
    ap.add_argument("--calfile", default="bench/out/hybrid-calibration.json")
    ap.add_argument("--results", default="bench/out/retrieval-heads-results.jsonl")
    ap.add_argument("--target", type=float, default=0.148)
    a = ap.parse_args()
    torch.set_num_threads(2)
    global SINK
    SINK = a.sink
    model = LlamaModel(embedded_model_path())
    mc = model.config
    if a.full:
        name = "full"
        def make():
            return full_cache(mc)
    elif a.window:
        name = f"window{a.window}-S{a.sink}"
        def make():
            return window_cache(mc, model.rope, a.window, a.sink)
    else:
        W = a.W or fit_window(a.k, a.kind, a.base, a.target)
        global RANK
        RANK = [tuple(x[:2]) for x in json.loads(Path(a.calfile).read_text())["kv_ranking"]]
        cfg = make_cfg(a.k, a.kind, W, a.base)
        cfg = cfg.with_(name=cfg.name + a.base)
        name = cfg.name
        def make():
            return hybrid_cache(mc, model.rope, cfg)
        t = time.perf_counter()
        b = 0 if a.nobytes else hybrid_bytes_at(model, cfg, N)
        print(
            name,
            "heads",
            cfg.retrieval_heads,
            f"bytes@8K {b / F16:.2%} (analytic {(a.k * head_bytes(a.kind, W) + (90 - a.k) * head_bytes(a.base, W)) / F16:.2%}) {time.perf_counter() - t:.0f}s",
            flush=True,
        )
    res = {"name": name}
    if a.ppl:
        tok = Tokenizer(embedded_model_path())
        toks = torch.tensor(tok.encode(Path(default_text_path()).read_text())[:N])
        t = time.perf_counter()
        c = make()
        losses, _ = run_tokens(model, c, toks, marks=[2048, 4096, N])
        res["ppl"] = {L: math.exp(float(losses[: L - 1].mean())) for L in (2048, 4096, N)}
        res["bytes"] = c.bytes_held() / F16
        print(
            name,
            "ppl",
            {k: round(v, 3) for k, v in res["ppl"].items()},
            f"bytes {res['bytes']:.2%} {time.perf_counter() - t:.0f}s",
            flush=True,
        )
    if a.pk:
        tok = Tokenizer(embedded_model_path())
        rng = random.Random(a.seed)
        out = []
        for L in [int(x) for x in a.pk.split(",")]:
            for d in [float(x) for x in a.depths.split(",")]:
                key = f"{rng.randrange(10000, 100000)}"
                prompt = passkey_prompt(tok, L, d, key)
                t = time.perf_counter()
                txt = tok.decode(list(greedy(model, make(), prompt, 8)))
                f = re.search(r"\d{5}", txt.replace(" ", ""))
                ok = bool(f and f.group(0) == key)
                out.append((L, d, ok))
                print(name, "pk", L, d, key, ok, repr(txt), f"{time.perf_counter() - t:.0f}s", flush=True)
        res["pk"] = out
    if a.nll:
        tok = Tokenizer(embedded_model_path())
        rng = random.Random(a.seed)
        out = []
        for L in [int(x) for x in a.nll.split(",")]:
            for d in [float(x) for x in a.depths.split(",")]:
                key = f"{rng.randrange(10000, 100000)}"
                if a.only and d not in [float(x) for x in a.only.split(",")]:
                    continue
                prompt = passkey_prompt(tok, L, d, key)
                ans = tok.encode(" " + key)
                toks = torch.tensor(prompt + ans)
                P = len(prompt)
                t = time.perf_counter()
                c = make()
                hs = [model.forward_hidden(toks[s : s + 256], s, c) for s in range(0, len(toks), 256)]
                h = torch.cat(hs)[P - 1 : P + len(ans) - 1]
                with torch.inference_mode():
                    lp = torch.log_softmax(model.logits(h), -1)
                tgt = toks[P : P + len(ans)]
                nll = -lp[torch.arange(len(ans)), tgt]
                ok = bool((lp.argmax(-1) == tgt).all())
                out.append((L, d, float(nll.sum()), ok))
                print(
                    name,
                    "nll",
                    L,
                    d,
                    key,
                    f"{float(nll.sum()):.2f}",
                    [round(float(x), 2) for x in nll],
                    ok,
                    f"{time.perf_counter() - t:.0f}s",
                    flush=True,
                )
        res["nll"] = out
    with open(a.results, "a") as fh:
        fh.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
