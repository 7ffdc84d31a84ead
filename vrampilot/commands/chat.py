"""`vrampilot chat`: one turn with a model, headless, on the same engine as the app window."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vrampilot.errors import UserError

if TYPE_CHECKING:
    from vrampilot.documents import Composed, DocumentSet, FitReport
    from vrampilot.engine import Message, PromptProgress
    from vrampilot.planner.search import Plan


def add_parser(sub: argparse._SubParsersAction) -> None:
    from vrampilot.commands.plan import add_plan_options

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
    p.add_argument(
        "--document",
        action="append",
        type=Path,
        metavar="FILE",
        help="attach a document (repeatable): PDF, DOCX, TXT, Markdown, HTML or source code. The whole text is "
        "given when it fits the plan's context, else the passages most relevant to the prompt (retrieval)",
    )
    p.set_defaults(handler=run_chat)


def run_chat(args: argparse.Namespace) -> int:
    from vrampilot.commands.plan import plan_from_args
    from vrampilot.engine import Engine, Message, SamplingParams

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

    messages: list[Message] = []
    if args.system:
        messages.append(Message("system", args.system))
    messages.append(Message("user", args.prompt))
    docs = _attach(args.document, plan, sampling.max_tokens) if args.document else None

    engine = Engine()
    loaded = engine.load(plan)
    for change in loaded.changes:
        print(f"vrampilot: llama.cpp could not allocate the plan; backed off: {change}", file=sys.stderr)
    composed: Composed | None = None
    if docs is not None:
        ds, fit = docs
        composed = ds.compose(
            args.system or "",
            [],
            args.prompt,
            mode=fit.mode,
            n_ctx=loaded.plan.settings.n_ctx,
            reply_tokens=sampling.max_tokens,
        )
        messages = composed.messages
    progress = _print_progress if (not args.json and sys.stderr.isatty()) else None
    try:
        if args.json:
            reply = engine.chat(messages, sampling, on_prompt_progress=progress)
        else:
            reply = engine.chat(messages, sampling, on_text=_print_piece, on_prompt_progress=progress)
            print()
            if composed is not None:
                from vrampilot.documents import sources_line

                line = sources_line(reply.text, composed.given)
                if line:
                    print(f"vrampilot: {line}", file=sys.stderr)
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
        if docs is not None and composed is not None:
            out["documents"] = _documents_json(docs[0], composed, reply.text)
            out["fit"] = docs[1].to_dict()
        print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _attach(paths: list[Path], plan: Plan, reply_tokens: int) -> tuple[DocumentSet, FitReport]:
    """Read each document, count it in the model's tokenizer and size it against the plan (stderr)."""
    from vrampilot.documents import DocumentSet, extract, tokenizer_for, tokens_text

    ds = DocumentSet(tokenizer_for(plan.spec.path).count)
    for path in paths:
        att = ds.attach(extract(path))
        pages = f"{att.document.n_pages} pages, " if att.document.n_pages else ""
        print(f"vrampilot: {att.name}: {pages}{tokens_text(att.tokens)} tokens", file=sys.stderr)
        for warning in att.document.warnings:
            print(f"vrampilot: {att.name}: {warning}", file=sys.stderr)
    fit = ds.fit(plan, reply_tokens=reply_tokens)
    print(f"vrampilot: {fit.message}", file=sys.stderr)
    if fit.suggested_ctx is not None:
        print(f"vrampilot: to re-plan, run again with --ctx {fit.suggested_ctx}", file=sys.stderr)
    return ds, fit


def _documents_json(ds: DocumentSet, composed: Composed, reply: str) -> list[dict[str, Any]]:
    from vrampilot.documents import cited_chunks

    given = composed.given
    cited = {g.n for g in cited_chunks(reply, given)}
    out = []
    for att in ds.attachments:
        chunks = [{**g.to_dict(), "cited": g.n in cited} for g in given.chunks if g.chunk.doc == att.name]
        out.append(
            {
                "name": att.name,
                "path": str(att.document.path),
                "kind": att.document.kind,
                "pages": att.document.n_pages,
                "tokens": att.tokens,
                "mode": given.mode,
                "chunks": chunks,
            }
        )
    return out


def _print_progress(p: PromptProgress) -> None:
    end = "\n" if p.done >= p.total else ""
    sys.stderr.write("\r" + p.text() + " " * 8 + end)
    sys.stderr.flush()


def _print_piece(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
