"""`vrampilot chat`: one turn with a model, headless, on the same engine as the app window."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from app.commands.plan import add_plan_options

    p = sub.add_parser(
        "chat",
        help="plan, load and answer one prompt in-process (streams the reply)",
        description="Plan settings like `vrampilot plan`, load the model with them and answer one prompt.",
    )
    add_plan_options(p)
    p.add_argument("--prompt", required=True, metavar="TEXT", help="the user's message")
    p.add_argument("--system", metavar="TEXT", help="system prompt")
    p.add_argument("--max-tokens", type=int, default=256, metavar="N", help="longest reply (default 256)")
    p.add_argument("--seed", type=int, metavar="N", help="sampling seed, for repeatable replies")
    p.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (0 = greedy; default 0.7)")
    p.add_argument("--force", action="store_true", help="load even when the plan does not fit")
    p.add_argument("--json", action="store_true", help="print one JSON object: reply, stats, settings")
    p.set_defaults(handler=run_chat)


def run_chat(args: argparse.Namespace) -> int:
    from app.commands.plan import plan_from_args
    from app.engine import Engine, Message, SamplingParams

    plan = plan_from_args(args)
    if not plan.fits and not args.force:
        why = plan.reasons[-1] if plan.reasons else "the plan does not fit this machine"
        raise UserError(f"{why} Pass --force to load it anyway, or change the plan options.")
    try:
        sampling = SamplingParams(max_tokens=args.max_tokens, seed=args.seed)
        if args.temperature is not None:
            sampling = sampling.with_(temperature=args.temperature)
    except ValueError as exc:
        raise UserError(str(exc)) from None

    messages = []
    if args.system:
        messages.append(Message("system", args.system))
    messages.append(Message("user", args.prompt))

    engine = Engine()
    loaded = engine.load(plan)
    for change in loaded.changes:
        print(f"vrampilot: llama.cpp could not allocate the plan; backed off: {change}", file=sys.stderr)
    try:
        if args.json:
            reply = engine.chat(messages, sampling)
        else:
            reply = engine.chat(messages, sampling, on_text=_print_piece)
            print()
            print(reply.stats.summary(), file=sys.stderr)
    finally:
        engine.unload()
    if args.json:
        out: dict[str, Any] = {
            "model": str(loaded.plan.spec.path),
            "reply": reply.text,
            "stats": reply.stats.to_dict(),
            "settings": loaded.plan.settings.to_dict(),
            "backoff": list(loaded.changes),
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _print_piece(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
