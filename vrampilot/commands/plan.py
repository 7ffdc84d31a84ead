"""`vrampilot plan` and `vrampilot export`: choose settings, explain them, print llama-server's line.

The option names are a contract scripts depend on (see docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from vrampilot.commands.common import resolve_model
from vrampilot.commands.options import add_target_options, target_request_from_args
from vrampilot.errors import UserError
from vrampilot.export import SHELLS, llama_server_argv, quote
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.gguf.projector import matching_projector
from vrampilot.hardware import Machine
from vrampilot.planner.plan import MAX_CTX, Pins, Plan, PlanError
from vrampilot.planner.search import MAX_THREADS, plan
from vrampilot.planner.settings import KV_CACHE_TYPES
from vrampilot.planner.target import Target, resolve_target
from vrampilot.planner.verify import Verification
from vrampilot.server.binaries import PORTABLE_NOTE, exported_command
from vrampilot.speed.service import detect_measured_machine
from vrampilot.units import parse_size

if TYPE_CHECKING:
    from vrampilot.planner.draft import DraftRequest


def _on_off(value: str) -> bool:
    v = value.lower()
    if v in ("on", "1", "true", "yes"):
        return True
    if v in ("off", "0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError("expected on or off")


def add_plan_options(p: argparse.ArgumentParser) -> None:
    """The options every command that plans shares (plan, export, chat)."""
    p.add_argument("model", nargs="?", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    add_target_options(p)
    p.add_argument(
        "--ctx",
        type=context_length,
        metavar="N",
        help=f"context length to reach (at least {MIN_CONTEXT})",
    )
    p.add_argument("--kv", choices=KV_CACHE_TYPES, help="K and V cache type")
    p.add_argument("--kv-k", choices=KV_CACHE_TYPES, help="K cache type")
    p.add_argument("--kv-v", choices=KV_CACHE_TYPES, help="V cache type")
    p.add_argument("--ngl", type=_at_least(0), metavar="N", help="layers on the GPU (n_layer + 1 = all)")
    p.add_argument("--batch", type=_at_least(1), metavar="N", help="logical batch size (-b)")
    p.add_argument("--ubatch", type=_at_least(1), metavar="N", help="physical batch size (-ub)")
    p.add_argument("--threads", type=_threads, metavar="N", help="generation threads (-t)")
    p.add_argument("--threads-batch", type=_threads, metavar="N", help="prompt threads (-tb)")
    p.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto", help="flash attention")
    p.add_argument("--swa-full", type=_on_off, metavar="on|off", help="full-size sliding-window cache")
    moe = p.add_argument_group("mixture of experts and constraints")
    experts = moe.add_mutually_exclusive_group()
    experts.add_argument(
        "--n-cpu-moe",
        type=_at_least(0),
        metavar="N",
        help="keep the routed experts of the first N layers in RAM (llama.cpp's --n-cpu-moe; default: "
        "the planner keeps every layer's attention on the GPU and as few experts in RAM as fit)",
    )
    experts.add_argument(
        "--no-cpu-experts", action="store_true", help="no routed experts in RAM: the whole model on the GPU"
    )
    experts.add_argument("--cpu-moe", action="store_true", help="every layer's routed experts in RAM (--cpu-moe)")
    moe.add_argument(
        "-ot",
        "--override-tensor",
        dest="cpu_tensors",
        action="append",
        metavar="PATTERN[=CPU]",
        help="keep the tensors whose names match this regular expression in RAM, as llama.cpp's "
        "-ot PATTERN=CPU (repeatable); the plan sizes everything else around them",
    )
    moe.add_argument(
        "--min-ctx",
        type=context_length,
        metavar="N",
        help="plan at least this context (the planner may choose more)",
    )
    moe.add_argument(
        "--keep-free",
        metavar="SIZE",
        help="leave this much memory unused on every GPU, e.g. 2GiB (a number alone is GiB); replaces --margin",
    )
    p.add_argument(
        "--tensor-split",
        metavar="A,B,...",
        type=_split,
        help="each device's share of the offloaded layers, in llama.cpp's order (RPC hosts first)",
    )
    p.add_argument(
        "--draft",
        metavar="PATH|ngram|mtp",
        help="speculative decoding: a draft model of the same tokenizer (GGUF), 'ngram' to draft "
        "from the context itself (prompt lookup), or 'mtp' to draft with the model's own "
        "multi-token-prediction block (llama-server only)",
    )
    p.add_argument("--draft-tokens", type=_at_least(1), metavar="N", help="tokens drafted per step (default: planned)")
    p.add_argument(
        "--draft-on", choices=("gpu", "cpu"), help="where the draft model goes (default: where decoding is faster)"
    )
    p.add_argument(
        "--draft-kv", choices=KV_CACHE_TYPES, default="f16", help="the draft's K and V cache type (-ctkd/-ctvd)"
    )
    p.add_argument(
        "--mmproj",
        metavar="FILE|auto",
        help="a vision projector (mmproj GGUF) to load with the model; 'auto': the one beside the "
        "model that fits it (mmproj*.gguf in the model's folder)",
    )
    p.add_argument(
        "--no-mmproj-offload",
        action="store_true",
        help="keep the vision projector on the CPU (llama.cpp's --no-mmproj-offload)",
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="size the compute buffer with the formula only, without asking llama.cpp (a dry run, ~5-200 ms)",
    )


# llama.cpp pads the context to a multiple of 256 cells: asking for less still gives 256.
MIN_CONTEXT = 256


def _at_least(lo: int, why: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}" + (f" ({why})" if why else "") + f", not {value}")
        return value

    return parse


def context_length(text: str) -> int:
    """--ctx and --min-ctx: from llama.cpp's smallest context to the largest it can take."""
    value = _at_least(MIN_CONTEXT, "the smallest context llama.cpp uses")(text)
    if value > MAX_CTX:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_CTX} (the most llama.cpp takes: its positions are 32-bit), not {value}"
        )
    return value


def _threads(text: str) -> int:
    value = _at_least(1)(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_THREADS} (llama.cpp's limit), not {value}")
    return value


def _split(text: str) -> tuple[float, ...]:
    try:
        shares = tuple(float(x) for x in text.replace("/", ",").split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not shares or any(x < 0 or x != x or x == float("inf") for x in shares) or sum(shares) <= 0:
        raise argparse.ArgumentTypeError(f"shares must be numbers of 0 or more, not all 0: {text!r}")
    return shares


def pins_from_args(args: argparse.Namespace) -> Pins:
    kv_k = args.kv_k or args.kv
    kv_v = args.kv_v or args.kv
    return Pins(
        n_ctx=args.ctx,
        type_k=kv_k,
        type_v=kv_v,
        n_gpu_layers=args.ngl,
        n_batch=args.batch,
        n_ubatch=args.ubatch,
        n_threads=args.threads,
        n_threads_batch=args.threads_batch,
        flash_attn=None if args.flash_attn == "auto" else args.flash_attn == "on",
        swa_full=args.swa_full,
        tensor_split=getattr(args, "tensor_split", None),
        n_cpu_moe=getattr(args, "n_cpu_moe", None),
        cpu_experts=True
        if getattr(args, "cpu_moe", False)
        else (False if getattr(args, "no_cpu_experts", False) else None),
        min_ctx=getattr(args, "min_ctx", None),
        keep_free_bytes=_gib_size(args.keep_free) if getattr(args, "keep_free", None) else None,
        cpu_tensor_patterns=_cpu_patterns(getattr(args, "cpu_tensors", None)),
        mmproj_cpu=True if getattr(args, "no_mmproj_offload", False) else None,
    )


def draft_request_from_args(args: argparse.Namespace) -> DraftRequest | None:
    """--draft and its options as the planner takes them; None without --draft."""
    from vrampilot.planner.draft import DraftRequest

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


def _cpu_patterns(values: list[str] | None) -> tuple[str, ...] | None:
    """-ot values as llama.cpp takes them (PATTERN=CPU, comma-separated) or bare patterns. Only the
    CPU is a target here: another buffer type would be a device the plan does not choose."""
    if not values:
        return None
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            pattern, _, buft = item.partition("=")
            if buft and buft.upper() != "CPU":
                raise UserError(f"-ot {item}: only =CPU is planned (the plan places layers on its devices itself)")
            out.append(pattern)
    return tuple(out)


def _gib_size(text: str) -> int:
    """A size such as 2GiB or 512MiB; a bare number is GiB (what --keep-free means)."""
    try:
        return parse_size(text + "GiB" if text.strip().replace(".", "", 1).isdigit() else text)
    except ValueError as exc:
        raise UserError(f"--keep-free: {exc}") from None


def _with_model_kernels(machine: Machine, spec: ModelSpec | None) -> Machine:
    """The machine with the weight types of `spec` measured, when its speed probe ran but lacked
    them (about 0.15 s per type, once per machine)."""
    speed = machine.speed
    if spec is None or speed is None or speed.probe is None:
        return machine
    from vrampilot.planner.cpu_speed import weight_table
    from vrampilot.planner.graph_factors import with_reference_types
    from vrampilot.speed.service import add_missing_kernels, kernels_missing

    missing = kernels_missing(speed, with_reference_types(weight_table(spec).types()))
    if not missing:
        return machine
    try:
        return replace(machine, speed=add_missing_kernels(machine, speed, missing))
    except Exception as exc:  # the plan still works with estimates from the nearest measured type
        print(f"vrampilot: could not measure {', '.join(missing)} kernels: {exc}", file=sys.stderr)
        return machine


def target_from_args(args: argparse.Namespace, spec: ModelSpec | None = None) -> Target:
    """The target the options ask for (commands/options.py), on this machine with its measured speed
    (and kernels measured for `spec`'s weight types when missing)."""
    request = target_request_from_args(args)
    return resolve_target(request, _with_model_kernels(detect_measured_machine(), spec))


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
            from vrampilot.planner.draft import plan_with_draft, stored_acceptance

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
    from vrampilot.planner.cache_table import cache_table

    result = plan_from_args(args)
    verification = None
    if args.verify:
        from vrampilot.planner.verify import verify_plan

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
