"""`vrampilot inspect [MODEL] [--json]`: the model as the planner sees it."""

from __future__ import annotations

import argparse
import json

from vrampilot.commands.common import resolve_model
from vrampilot.gguf import load_model_spec
from vrampilot.gguf.describe import format_spec, spec_to_dict


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("inspect", help="show a GGUF model's architecture and weights (default: embedded model)")
    p.add_argument("model", nargs="?", help="GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    spec = load_model_spec(resolve_model(args.model))
    if args.json:
        print(json.dumps(spec_to_dict(spec), indent=2))
    else:
        print(format_spec(spec))
    return 0
