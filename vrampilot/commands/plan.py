"""`vrampilot plan` and `vrampilot export`: choose settings, explain them, print llama-server's line.

The option names are a contract scripts depend on (see docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from vrampilot.commands.common import resolve_model
from vrampilot.commands.options import add_target_options, target_request_from_args
from vrampilot.errors import UserError
from vrampilot.export import SHELLS, llama_server_argv, quote
from vrampilot.gguf import ModelSpec, load_model_spec, matching_projector
from vrampilot.planner.errors import PlanError
from vrampilot.planner.knobs import add_knob_options, at_least, pins_from_knobs
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.search.verify import Verification
from vrampilot.planner.settings import KV_CACHE_TYPES
from vrampilot.planner.target import Target, resolve_target
from vrampilot.server.binaries import PORTABLE_NOTE, exported_command
from vrampilot.speed import MeasuredMachine, detect_measured_machine

if TYPE_CHECKING:
    from vrampilot.planner.search.draft import DraftRequest


def add_plan_options(p: argparse.ArgumentParser) -> None:
    """The options every command that plans shares (plan, export, chat)."""
    p.add_argument("model", nargs="?", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    add_target_options(p)
    add_knob_options(p)
    p.add_argument(
        "--draft",
        metavar="PATH|ngram|mtp",
        help="speculative decoding: a draft model of the same tokenizer (GGUF), 'ngram' to draft "
        "from the context itself (prompt lookup), or 'mtp' to draft with the model's own "
        "multi-token-prediction block (llama-server only)",
    )
    p.add_argument("--draft-tokens", type=at_least(1), metavar="N", help="tokens drafted per step (default: planned)")
    p.add_argument(
        "--draft-on", choices=("gpu", "cpu"), help="where the draft model goes (default: where decoding is faster)"
    )
    p.add_argument(
        "--draft-kv", choices=KV_CACHE_TYPES, default="f16", help="the draft's K and V cache type (-ctkd/-ctvd)"
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="size the compute buffer with the formula only, without asking llama.cpp (a dry run, ~5-200 ms)",
    )


def pins_from_args(args: argparse.Namespace) -> Pins:
    """What the options pinned, knob by knob (planner/knobs.py)."""
    return Pins(**pins_from_knobs(args))


def draft_request_from_args(args: argparse.Namespace) -> DraftRequest | None:
    """--draft and its options as the planner takes them; None without --draft."""
    from vrampilot.planner.search.draft import DraftRequest

    draft = getattr(args, "draft", None)
    if not draft:
        for option in ("draft_tokens", "draft_on"):
            if getattr(args, option, None) is not None:
                raise UserError(f"--{option.replace('_', '-')} needs --draft PATH or --draft ngram")
        return None
    on = getattr(args, "draft_on", None)
    kind = draft.lower() if draft.lower() in ("ngram", "mtp") else "draft"
    if kind != "draft" and on is not None:
        raise UserError(
            "--draft-on places a draft model: "
            + ("n-gram drafting has none" if kind == "ngram" else "the MTP block goes with the model's last layer")
        )
    return DraftRequest(
        kind=kind,
        model_path=None if kind != "draft" else Path(draft).expanduser(),
        n_draft=getattr(args, "draft_tokens", None),
        on_gpu=None if on is None else on == "gpu",
        type_k=getattr(args, "draft_kv", "f16"),
        type_v=getattr(args, "draft_kv", "f16"),
    )


def _with_model_kernels(found: MeasuredMachine, spec: ModelSpec | None) -> MeasuredMachine:
    """The machine with the weight types of `spec` measured, when its speed probe ran but lacked
    them (about 0.15 s per type, once per machine)."""
    machine, speed = found.machine, found.speed
    if spec is None or speed is None or speed.probe is None:
        return found
    from vrampilot.planner.speed_model.cpu_speed import weight_table
    from vrampilot.planner.speed_model.graph_factors import with_reference_types
    from vrampilot.speed import add_missing_kernels, kernels_missing

    missing = kernels_missing(speed, with_reference_types(weight_table(spec).types()))
    if not missing:
        return found
    try:
        return MeasuredMachine(machine, add_missing_kernels(machine, speed, missing))
    except Exception as exc:  # the plan still works with estimates from the nearest measured type
        print(f"vrampilot: could not measure {', '.join(missing)} kernels: {exc}", file=sys.stderr)
        return found


def target_from_args(args: argparse.Namespace, spec: ModelSpec | None = None) -> Target:
    """The target the options ask for (commands/options.py), on this machine with its measured speed
    (and kernels measured for `spec`'s weight types when missing)."""
    request = target_request_from_args(args)
    found = _with_model_kernels(detect_measured_machine(), spec)
    return resolve_target(request, found.machine, found.speed)


def plan_from_args(args: argparse.Namespace) -> Plan:
    spec = load_model_spec(resolve_model(args.model))
    pins = pins_from_args(args)
    mmproj = getattr(args, "mmproj", None)
    if mmproj == "auto":
        found = matching_projector(spec)
        if found is None:
            raise UserError(
                f"no vision projector that fits {spec.path.name} beside it (mmproj*.gguf in {spec.path.parent})"
            )
        mmproj = str(found)
    if mmproj:
        pins = replace(pins, mmproj_path=str(Path(mmproj).expanduser()))
    try:
        target = target_from_args(args, spec)
        request = draft_request_from_args(args)
        if request is not None:
            from vrampilot.planner.search.draft import plan_with_draft, stored_acceptance

            acceptance = stored_acceptance(spec.path, request)
            return plan_with_draft(spec, target, pins, request, acceptance=acceptance, exact=not args.estimate)
        return plan(spec, target, pins, exact=not args.estimate)
    except PlanError as exc:
        raise UserError(str(exc)) from None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="choose llama.cpp settings that fit, with memory, speed and reasons")
    add_plan_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--verify",
        action="store_true",
        help="also ask llama.cpp for the plan's KV, compute and output sizes (a dry run without weights)",
    )
    p.add_argument(
        "--cache",
        action="store_true",
        help="also show the KV cache by part at 8K, 32K, 128K and 1M tokens, beside what a plain "
        "MHA, GQA and MLA cache of the same model would need",
    )
    p.set_defaults(handler=run_plan)

    e = sub.add_parser("export", help="print the llama-server command for the plan")
    add_plan_options(e)
    e.add_argument("--shell", choices=SHELLS, default="bash", help="quote for this shell")
    e.add_argument("--host", help="llama-server --host")
    e.add_argument("--port", type=int, help="llama-server --port")
    e.add_argument("--server", help="path of another llama-server program (default: the one VRAM Pilot ships)")
    e.set_defaults(handler=run_export)


def run_plan(args: argparse.Namespace) -> int:
    from vrampilot.commands.plan_report import format_cache_table, format_plan, plan_to_dict
    from vrampilot.planner.search.cache_table import cache_table

    result = plan_from_args(args)
    verification = None
    if args.verify:
        from vrampilot.planner.search.verify import verify_plan

        verification = verify_plan(result)
    table = cache_table(result.spec, result.settings) if args.cache else None
    if args.json:
        d = plan_to_dict(result)
        if verification is not None:
            d["verify"] = verification.as_dict()
        if table is not None:
            d["cache"] = table.as_dict()
        print(json.dumps(d, indent=2))
    else:
        print(format_plan(result))
        if verification is not None:
            print(format_verification(verification))
        if table is not None:
            print("\n" + format_cache_table(table))
    return 0 if result.fits else 1


def format_verification(v: Verification) -> str:
    from vrampilot.units import format_bytes

    if v.refused:
        return f"\nllama.cpp dry run: refused: {v.refused}"
    rows = [
        ("KV cache", v.kv_predicted_bytes, v.kv_llama_bytes),
        ("compute", v.compute_predicted_bytes, v.compute_llama_bytes),
        ("(formula)", v.compute_formula_bytes, v.compute_llama_bytes),
        ("output", v.output_predicted_bytes, v.output_llama_bytes),
    ]
    lines = [f"\nllama.cpp dry run ({v.seconds:.2f} s, CPU build): predicted vs llama.cpp"]
    for name, pred, real in rows:
        pct = 100.0 * (pred - real) / real if real else 0.0
        lines.append(f"  {name:<9} {format_bytes(pred):>11} {format_bytes(real):>11}  {pct:+.1f}%")
    return "\n".join(lines)


def run_export(args: argparse.Namespace) -> int:
    import sys

    result = plan_from_args(args)
    if args.server:  # the user's own llama-server, as given
        line = quote(
            llama_server_argv(result.spec.path, result.settings, host=args.host, port=args.port, server=args.server),
            args.shell,
        )
    else:
        elsewhere = result.target.elsewhere
        line = exported_command(
            result.spec.path, result.settings, args.shell, elsewhere=elsewhere, host=args.host, port=args.port
        )
        if elsewhere:
            print(f"vrampilot: {PORTABLE_NOTE}", file=sys.stderr)
    if not result.fits:
        print(
            "vrampilot: warning: this plan does not fit the target; the command may fail to load",
            file=sys.stderr,
        )
    print(line)
    return 0
