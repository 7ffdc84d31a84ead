"""`vrampilot chat`: one turn with a model, headless, on the same engine as the app window.

Nothing is kept unless asked: `--save` stores the turn in the app's chats (the window lists it),
`--chat ID` continues a saved chat (and saves the new turn to it). Turns follow the same rules as
the window's (vrampilot.storage.conversation).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vrampilot.errors import UserError
from vrampilot.speed import cpu_snapshot, others_cpu_share

if TYPE_CHECKING:
    from vrampilot.agents import McpConfig
    from vrampilot.documents import Composed, DocumentSet, FitReport
    from vrampilot.engine import GenerationStats, Message, PromptProgress, SamplingParams
    from vrampilot.planner.plan import Plan
    from vrampilot.tool_turn import ToolRound


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument(
        "--logit-bias",
        action="append",
        default=[],
        metavar="TEXT=BIAS",
        help="add BIAS to the logits of TEXT's tokens (repeatable; -100 bans them, 100 forces them), as "
        "llama-server's logit_bias; with tools, the first round's only: '{=100' makes the model start "
        "a call at once (docs/agents.md)",
    )
    p.add_argument("--force", action="store_true", help="load even when the plan does not fit")
    p.add_argument(
        "--save", action="store_true", help="keep this turn in the app's chats (without it the CLI keeps no history)"
    )
    p.add_argument(
        "--chat",
        type=int,
        metavar="ID",
        help="continue the saved chat ID (its turns are sent first; "
        "the new turn is saved to it); IDs are in `--json` output and the app",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object: reply, stats, settings")
    p.add_argument(
        "--document",
        action="append",
        type=Path,
        metavar="FILE",
        help="attach a document (repeatable): PDF, DOCX, TXT, Markdown, HTML or source code. The whole text is "
        "given when it fits the plan's context, else the passages most relevant to the prompt (retrieval)",
    )
    p.add_argument(
        "--image",
        action="append",
        type=Path,
        metavar="FILE",
        help="show the model an image with the prompt (repeatable; PNG, JPEG, GIF or BMP): needs the "
        "model's vision projector (--mmproj), planned and loaded with it",
    )
    tools = p.add_argument_group("tools (MCP servers; docs/agents.md)")
    tools.add_argument(
        "--mcp",
        type=Path,
        metavar="FILE",
        help="the MCP servers' config (the mcpServers JSON of Claude Desktop, Cursor, LM Studio); default: "
        "mcp.json in the data folder, when it exists. With servers, the chat runs in llama-server with their tools",
    )
    tools.add_argument("--no-tools", action="store_true", help="do not start the MCP servers for this chat")
    tools.add_argument(
        "--allow-tool",
        action="append",
        default=[],
        metavar="NAME",
        help="run this tool without asking (repeatable; TOOL or SERVER/TOOL). Other calls are asked on the "
        "terminal; without a terminal they are denied and the model is told so",
    )
    tools.add_argument(
        "--tool-choice",
        choices=("auto", "required"),
        default="auto",
        help="first round: the model decides (auto) or must call a tool (required); later rounds are auto",
    )
    tools.add_argument(
        "--one-call",
        action="store_true",
        help="at most one tool call a round (llama-server's parallel_tool_calls false): a small model "
        "forced to call (--tool-choice required) otherwise writes calls until --max-tokens",
    )
    tools.add_argument(
        "--tool-rounds", type=int, default=8, metavar="N", help="most rounds of tool calls before the model must answer"
    )
    p.set_defaults(handler=run_chat)


def run_chat(args: argparse.Namespace) -> int:
    from vrampilot.commands.plan import plan_from_args
    from vrampilot.engine import Engine, SamplingParams

    images = tuple(str(p) for p in args.image or ())
    if images and not args.mmproj:
        raise UserError("--image needs the model's vision projector: add --mmproj FILE (or --mmproj auto)")
    if images and (args.save or args.chat is not None or args.document):
        raise UserError("--image is for one turn: saved chats and documents do not keep images yet")
    prompt = _text_arg(args.prompt, "--prompt")
    system = _text_arg(args.system, "--system", allow_empty=True) if args.system is not None else None
    plan = plan_from_args(args)
    if not plan.fits and not args.force:
        why = plan.reasons[-1] if plan.reasons else "the plan does not fit this machine"
        raise UserError(f"{why} Pass --force to load it anyway, or change the plan options.")
    try:
        sampling = SamplingParams(
            max_tokens=args.max_tokens, seed=args.seed, logit_bias=tuple(map(_logit_bias_arg, args.logit_bias))
        )
        if args.temperature is not None:
            sampling = sampling.with_(temperature=args.temperature)
    except ValueError as exc:
        raise UserError(str(exc)) from None

    agents = _agents_config(args)
    if agents is not None and (images or args.document):
        raise UserError(
            "--image and --document are read by the in-app engine; a chat with tools runs in "
            "llama-server: add --no-tools to attach them"
        )
    history = _History(args.chat, args.save or args.chat is not None, plan, system)
    if plan.settings.server_only:
        # Such a plan chats through a private llama-server; --image and --document are the engine's.
        why = plan.settings.server_only
        if images:
            raise UserError(f"--image is read by the in-app engine, and this plan runs in llama-server ({why})")
        if args.document:
            raise UserError(f"--document is read by the in-app engine, and this plan runs in llama-server ({why})")
    messages = history.ask(prompt)  # stored before the model loads
    if images:
        messages[-1] = replace(messages[-1], images=images)
    if agents is not None:
        return _chat_with_tools(args, plan, agents, history, messages, sampling)
    if plan.settings.server_only:
        return _chat_served(args, plan, history, messages, sampling)
    docs = _attach(args.document, plan, sampling.max_tokens) if args.document else None

    engine = Engine()
    loaded = engine.load(plan)
    for change in loaded.changes:
        print(f"vrampilot: llama.cpp could not allocate the plan; backed off: {change}", file=sys.stderr)
    composed: Composed | None = None
    if docs is not None:
        ds, fit = docs
        composed = ds.compose(
            system or "",
            [m for m in messages[:-1] if m.role != "system"],
            messages[-1].content,  # the question as stored: an unanswered one joins it
            mode=fit.mode,
            n_ctx=loaded.plan.settings.n_ctx,
            reply_tokens=sampling.max_tokens,
        )
        messages = composed.messages
    progress = _print_progress if (not args.json and sys.stderr.isatty()) else None

    started = cpu_snapshot()
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
    # An image's encoding is no prompt reading: such a reply would teach the speed model wrong.
    speed = None if images else _learn(loaded.plan, reply.stats, others_cpu_share(started))
    if speed is not None and not args.json:
        print(f"vrampilot: {speed['line']}", file=sys.stderr)
    chat_id = history.save(reply.text, reply.stats.to_dict())
    if args.json:
        out: dict[str, Any] = {
            "chat_id": chat_id,
            "model": str(loaded.plan.spec.path),
            "reply": reply.text,
            "stats": reply.stats.to_dict(),
            "settings": loaded.plan.settings.to_dict(),
            "backoff": list(loaded.changes),
            "speed": {k: v for k, v in speed.items() if k != "line"} if speed is not None else None,
        }
        if docs is not None and composed is not None:
            out["documents"] = _documents_json(docs[0], composed, reply.text)
            out["fit"] = docs[1].to_dict()
        print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _learn(plan: Plan, stats: GenerationStats, others_share: float) -> dict[str, Any] | None:
    """Teach the speed model this reply (planner/calibration.py); what it predicted and measured."""
    from vrampilot.planner.calibration import record_reply, reply_pace_ms

    if plan.settings.drafting:
        return _learn_drafting(plan, stats)
    if plan.target.speed is None:
        return None
    reply = stats.measurement(others_share, reply_pace_ms(plan))
    try:
        speed = record_reply(plan.target.speed, plan, reply)
    except OSError as exc:  # a read-only data folder must not lose the reply
        print(f"vrampilot: the reply's speed was not kept: {_os_error_text(exc)}", file=sys.stderr)
        return None
    last = speed.last_replies[-1]
    n = speed.factors_for(last.backend).n_replies
    own = speed.factors_for(last.backend, last.model).n_replies
    line = (
        f"speed: predicted {last.predicted_decode_tps:.1f} tokens/s generating, measured {last.decode_tps:.1f}; "
        f"predicted {last.predicted_prefill_tps:.0f} reading the prompt, measured {last.prefill_tps:.0f}"
        + (f" (not learned from: {last.set_aside})" if last.set_aside else "")
        + f"; the speed model has learned from {n} repl{'y' if n == 1 else 'ies'} here, {own} of this model"
    )
    return {
        "predicted_decode_tps": round(last.predicted_decode_tps, 2),
        "predicted_prefill_tps": round(last.predicted_prefill_tps, 2),
        "others_cpu_share": round(others_share, 3),
        "pace_share": last.pace_share,  # the machine's pace against its usual (speed/pace.py)
        "set_aside": last.set_aside or None,  # why it was not learned from
        "learned_replies": n,
        "learned_replies_of_model": own,
        "line": line,
    }


def _os_error_text(exc: OSError) -> str:
    """A file the reply's record could not be written to, as the other cannot-write lines say it."""
    from vrampilot.paths import cannot_write_text

    return cannot_write_text(exc.filename, exc.strerror) if exc.filename and exc.strerror else str(exc)


def _learn_drafting(plan: Plan, stats: GenerationStats) -> dict[str, Any] | None:
    """A drafted reply teaches the draft's acceptance (planner/search/draft.py), never the speed model."""
    from vrampilot.planner.search.draft import learn_acceptance

    try:
        learned = learn_acceptance(plan, stats.draft_tokens, stats.draft_accepted, decode_tps=stats.decode_tps)
    except OSError as exc:
        print(f"vrampilot: the reply's drafting was not kept: {_os_error_text(exc)}", file=sys.stderr)
        return None
    if learned is None:
        return None
    predicted = plan.draft.acceptance.p if plan.draft is not None else learned.p
    line = (
        f"drafting: {stats.draft_accepted}/{stats.draft_tokens} drafted tokens accepted; acceptance per token "
        f"now {learned.p:.0%} over {learned.replies} repl{'y' if learned.replies == 1 else 'ies'} "
        f"(the plan assumed {predicted:.0%})"
    )
    return {"acceptance": round(learned.p, 4), "acceptance_replies": learned.replies, "line": line}


def _chat_served(
    args: argparse.Namespace,
    plan: Plan,
    history: _History,
    messages: list[Message],
    sampling: SamplingParams,
) -> int:
    """One turn through a private llama-server (a plan across RPC hosts, or drafting with MTP)."""
    import threading

    from vrampilot.server.private import private_server
    from vrampilot.server.process import ServerExited, exit_text

    try:
        with private_server(plan) as backend:
            on_text = (lambda _t: None) if args.json else _print_piece
            started = cpu_snapshot()  # the server's CPU counts as ours (cpu_load._own_seconds)
            reply = backend.reply(
                None,
                messages,
                sampling,
                on_text=on_text,
                on_report=lambda _x: None,
                cancel=threading.Event(),
                trim=False,
            )
            others = others_cpu_share(started)
    except ServerExited as exc:
        why = exit_text(exc.code, exc.lines)  # one line; llama.cpp's reason when it aborted
        what = "the plan across the RPC hosts" if plan.settings.uses_rpc else "llama-server running the plan"
        raise UserError(f"{what} stopped: {why}") from None
    if not args.json:
        print()
        print(reply.stats.summary(), file=sys.stderr)
    speed = _learn(plan, reply.stats, others)
    if speed is not None and not args.json:
        print(f"vrampilot: {speed['line']}", file=sys.stderr)
    chat_id = history.save(reply.text, reply.stats.to_dict())
    if args.json:
        out: dict[str, Any] = {
            "chat_id": chat_id,
            "model": str(plan.spec.path),
            "reply": reply.text,
            "stats": reply.stats.to_dict(),
            "settings": plan.settings.to_dict(),
            "backoff": [],
            "served_by": "llama-server",
            "speed": {k: v for k, v in speed.items() if k != "line"} if speed is not None else None,
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _chat_with_tools(
    args: argparse.Namespace,
    plan: Plan,
    config: McpConfig,
    history: _History,
    messages: list[Message],
    sampling: SamplingParams,
) -> int:
    """A turn with the MCP servers' tools, through a private llama-server (agents/loop.py says why)."""
    import threading

    from vrampilot.agents import ApprovalPolicy, McpManager, ToolCatalog, ToolLoop
    from vrampilot.commands.chat_tools import print_step, report_servers, terminal_approver
    from vrampilot.server.private import private_server
    from vrampilot.server.process import ServerExited, exit_text

    cancel = threading.Event()
    with McpManager(config) as manager:  # the servers start while the model loads
        try:
            with private_server(plan) as backend:
                report_servers(manager)
                catalog = ToolCatalog.build(manager.tools())
                if not catalog:
                    print("vrampilot: no MCP tool is available: the model answers without tools", file=sys.stderr)
                loop = ToolLoop(
                    backend,
                    manager,
                    catalog,
                    terminal_approver(),
                    ApprovalPolicy(),
                    allowed_names=tuple(args.allow_tool),
                    max_rounds=args.tool_rounds,
                    first_choice=args.tool_choice,
                    parallel_calls=not args.one_call,
                    # a quarter of the context for one result, at about 3 characters a token
                    result_budget_chars=max(2_000, backend.n_ctx() // 4 * 3),
                    on_step=(lambda _s: None) if args.json else print_step,
                    on_round=history.save_round,
                )
                on_text = (lambda _t: None) if args.json else _print_piece
                result = loop.run(messages, sampling, on_text=on_text, cancel=cancel)
        except ServerExited as exc:
            raise UserError(f"llama-server running the plan stopped: {exit_text(exc.code, exc.lines)}") from None
    reply = result.reply
    if result.unparsed is not None:
        print(f"vrampilot: {result.unparsed}; its text is kept as the answer", file=sys.stderr)
    if not args.json:
        print()
        if result.capped:
            print(
                f"vrampilot: the model called tools for {args.tool_rounds} round{'s' if args.tool_rounds != 1 else ''} "
                "(--tool-rounds); "
                "it was asked to answer without them",
                file=sys.stderr,
            )
        print(reply.stats.summary(), file=sys.stderr)
    chat_id = history.save(reply.text, reply.stats.to_dict())
    if args.json:
        out: dict[str, Any] = {
            "chat_id": chat_id,
            "model": str(plan.spec.path),
            "reply": reply.text,
            "stats": reply.stats.to_dict(),
            "settings": plan.settings.to_dict(),
            "served_by": "llama-server",
            "tool_rounds": [r.to_dict() for r in result.rounds],
            "tool_rounds_capped": result.capped,
            "unparsed": result.unparsed,
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _agents_config(args: argparse.Namespace) -> McpConfig | None:
    """The MCP servers this chat uses: --mcp FILE, else the data folder's mcp.json; None without
    enabled servers (the chat is as it was without tools)."""
    if args.no_tools:
        return None
    if args.tool_rounds < 1:
        raise UserError("--tool-rounds must be at least 1")
    from vrampilot.agents import load_config

    config = load_config(args.mcp, missing_ok=args.mcp is None)
    if not config.enabled():
        if args.mcp is not None:
            raise UserError(f"{args.mcp} has no enabled MCP server")
        return None
    return config


def _logit_bias_arg(value: str) -> tuple[str, float]:
    """`--logit-bias TEXT=BIAS`: split at the last `=`, so TEXT may hold one (`==5` biases `=`)."""
    text, eq, bias = value.rpartition("=")
    try:
        if not eq or not text:
            raise ValueError
        return _text_arg(text, "--logit-bias", allow_empty=True), float(bias)
    except ValueError:
        raise UserError(f"--logit-bias takes TEXT=BIAS, for example '{{=100': not {value!r}") from None


def _text_arg(value: str, option: str, *, allow_empty: bool = False) -> str:
    """Command-line text as the model gets it: UTF-8, and not empty where a message is required."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{option} is not valid UTF-8 text") from None
    if not allow_empty and not value.strip():
        raise UserError(f"{option} is empty")
    return value


class _History:
    """The saved chat this turn belongs to, if any (`--save`, `--chat ID`)."""

    def __init__(self, chat_id: int | None, keep: bool, plan: Plan, system: str | None) -> None:
        self.chat_id, self.keep, self.plan, self.system = chat_id, keep, plan, system
        self._service = None
        if keep:
            from vrampilot.storage import ChatStore, ConversationService

            self._service = ConversationService(ChatStore())
            if chat_id is not None:
                try:
                    self._service.chat(chat_id)
                except KeyError:
                    raise UserError(f"there is no saved chat {chat_id}") from None

    def ask(self, prompt: str) -> list[Message]:
        """The conversation the model answers, ending with `prompt`. A kept chat stores the question
        first, as the window does: a command killed mid-reply loses the reply only, and a disk that
        cannot take the question (full, read-only) says so before the model loads, not after it
        wrote a reply. A question left without a reply (a killed turn) joins this one."""
        from vrampilot.engine import Message
        from vrampilot.storage import StorageError

        if self._service is None:
            out = [Message("system", self.system)] if self.system else []
            return [*out, Message("user", prompt)]
        created = None
        try:
            if self.chat_id is None:
                model = str(self.plan.spec.path)
                self.chat_id = created = self._service.create(model_path=model, system_prompt=self.system or "").id
            self._service.ask(self.chat_id, prompt)
        except StorageError as exc:
            if created is not None:  # no empty chat left in the list
                with contextlib.suppress(StorageError):
                    self._service.delete(created)
            raise UserError(f"{exc}; no reply was made") from None
        messages = self._service.for_model(self.chat_id)
        if self.system is not None:  # --system replaces the chat's own for this turn
            messages = [Message("system", self.system), *(m for m in messages if m.role != "system")]
        return messages

    def save_round(self, rnd: ToolRound) -> None:
        """A round of tool calls, stored as it ends (kill -9 loses at most the round in progress)."""
        if self._service is not None and self.chat_id is not None:
            self._service.add_tool_round(self.chat_id, rnd)

    def save(self, reply: str, stats: dict[str, Any]) -> int | None:
        """Store the reply to the question `ask` stored."""
        if self._service is None or self.chat_id is None:
            return None
        self._service.add_reply(self.chat_id, reply, stats)
        self._service.store.close()
        return self.chat_id


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
