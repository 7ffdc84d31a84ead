"""One passkey case of the evaluation under variants of the default's per-head reaches: which KV heads
see the needle, the answer's first-token margin (the space before the digits against the best other
token), and the greedy answer. A diagnosis tool, not an evaluation: it reads an evaluation prompt.

    .venv/bin/python bench/experiments/passkey-margin-exp.py KEY DEPTH VARIANT[,VARIANT...]

Variants: default, full, sinks:N (N sink tokens), set:R (every head R), min:R (shorter reaches raised to R), minl:LO-HI:R
(the same within layers LO..HI), map:A|B:R (heads of reach A or B get R), heads:L.H|L.H:R,
file:hybrid-budgets.json (bench/hybrid_calibrate.py --budgets output). R may be None (every token).
Results: bench/experiments/issue20-budgets.md.
"""

from __future__ import annotations

import copy
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import json

import torch

from vrampilot.hybrid.cache import full_cache, hybrid_cache
from vrampilot.hybrid.config import HybridConfig, get_config
from vrampilot.hybrid.evaluate import _PASSKEY_NEEDLE, Tokenizer, passkey_prompt, prefill, setup_torch
from vrampilot.hybrid.model import LlamaModel
from vrampilot.hybrid.plan import head_plans
from vrampilot.paths import embedded_model_path


def _reach(text: str) -> int | None:
    return None if text == "None" else int(text)


def variant(cfg: HybridConfig, name: str) -> HybridConfig | None:
    if name == "default":
        return cfg
    if name == "full":
        return None
    if name.startswith("file:"):
        saved = json.loads(Path(name[5:]).read_text(encoding="utf-8"))
        return cfg.with_(name=name, head_reach=tuple((il, h, r) for il, h, r, _ in saved["head_reach"]))
    op, a, b = [*name.split(":"), "", ""][:3]
    if op == "sinks":  # sinks:N keeps N sink tokens in every head (the default keeps 32)
        return cfg.with_(name=name, n_sink=int(a))
    new: Callable[[int, int, int | None], int | None]
    if op == "set":
        new = lambda il, h, r: _reach(a)  # noqa: E731
    elif op == "min":
        new = lambda il, h, r: r if r is None or r >= int(a) else int(a)  # noqa: E731
    elif op == "minl":
        lo, hi = map(int, a.split("-"))
        new = lambda il, h, r: r if not lo <= il <= hi or r is None or r >= int(b) else int(b)  # noqa: E731
    elif op == "map":
        src = {_reach(x) for x in a.split("|")}
        new = lambda il, h, r: _reach(b) if r in src else r  # noqa: E731
    elif op == "heads":
        pick = {(int(x.split(".")[0]), int(x.split(".")[1])) for x in a.split("|")}
        new = lambda il, h, r: _reach(b) if (il, h) in pick else r  # noqa: E731
    else:
        raise SystemExit(f"unknown variant {name!r}")
    return cfg.with_(name=name, head_reach=tuple((il, h, new(il, h, r)) for il, h, r in cfg.head_reach))


def main() -> None:
    key, depth, names = sys.argv[1], float(sys.argv[2]), [v for v in sys.argv[3].split(",") if v]
    setup_torch(1)
    path = embedded_model_path()
    assert path is not None
    model, tok = LlamaModel(path), Tokenizer(path)
    mc = model.config
    prompt = passkey_prompt(tok, 8176, depth, key)
    needle = tok.encode(_PASSKEY_NEEDLE.format(key=key))
    start = next(i for i in range(len(prompt)) if prompt[i : i + len(needle)] == needle)
    q = len(prompt) - 1
    print(f"prompt {len(prompt)}, needle {start}-{start + len(needle) - 1}, {q - start - len(needle) + 1}-{q - start} back")
    cfg = get_config("default")
    seen: Counter[str] = Counter()
    for row in head_plans(cfg, mc.n_layer, mc.n_head_kv, mc.shape):
        for p in row:
            assert p is not None
            first = p.n_sink + int(p.first_block(torch.tensor([q]))[0]) * p.block
            n = sum(1 for i in range(start, start + len(needle)) if i >= first)
            seen["whole" if n == len(needle) else "none" if n == 0 else "part"] += 1
    print(f"default: KV heads that see the needle at the answer: {dict(seen)}")
    want = tok.encode(" " + key)[0]
    for name in names:
        t0 = time.time()
        c = variant(cfg, name)
        cache = full_cache(mc) if c is None else hybrid_cache(mc, model.rope, c)
        hidden = prefill(model, cache, prompt)
        assert hidden is not None
        logits = model.logits(hidden[-1])
        other = logits.clone()
        other[want] = float("-inf")

        def answer(cache: object, first: int) -> str:
            pos, nxt, out = len(prompt), first, []
            for _ in range(8):
                out.append(nxt)
                hidden = model.forward_hidden(torch.tensor([nxt]), pos, cache)  # type: ignore[arg-type]
                pos, nxt = pos + 1, int(model.logits(hidden[-1]).argmax())
            return tok.decode(out)

        # The answer with its first token forced to the space before the digits: is the key still
        # there when the first token is not what decides?
        forced = answer(copy.deepcopy(cache), want)
        text = answer(cache, int(logits.argmax()))
        print(f"{name}: margin {float(logits[want] - other.max()):+.3f} ({tok.decode([want])!r} against "
              f"{tok.decode([int(other.argmax())])!r}), answer {text!r} ({'yes' if key in text else 'no'}), "
              f"forced {forced!r} ({'yes' if key in forced.replace(' ', '') else 'no'}), {cache.bytes_held() / 2**20:.2f} MiB, {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
