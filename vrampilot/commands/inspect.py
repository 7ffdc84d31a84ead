"""`vrampilot inspect [MODEL] [--json]`: the model as the planner sees it."""

from __future__ import annotations

import argparse
import json

from vrampilot.commands.common import resolve_model
from vrampilot.gguf import (
    ProjectorSpec,
    format_projector,
    format_spec,
    load_model_spec,
    matching_projector,
    read_gguf,
    read_projector,
    spec_to_dict,
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("inspect", help="show a GGUF model's architecture and weights (default: embedded model)")
    p.add_argument("model", nargs="?", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    header = read_gguf(path)
    if header.get("general.architecture") == "clip":
        return _run_projector(args, read_projector(path, gguf=header))
    spec = load_model_spec(path)
    beside = matching_projector(spec)
    if args.json:
        d = spec_to_dict(spec)
        d["vision_projector"] = str(beside) if beside else None
        print(json.dumps(d, indent=2))
    else:
        extra = [("Vision projector", f"{beside.name} beside it fits (plan, serve: --mmproj auto)")] if beside else []
        print(format_spec(spec, extra))
    return 0


def _run_projector(args: argparse.Namespace, proj: ProjectorSpec) -> int:
    print(json.dumps({"projector": proj.to_dict()}, indent=2) if args.json else format_projector(proj))
    return 0
