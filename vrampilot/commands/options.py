"""The CLI's options for what a plan is for, shared by every command that plans or judges a model
(plan, export, chat, serve, hub files): added once, mapped once to a `TargetRequest`
(vrampilot.planner.target), so no command can take an option and forget to honour it.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from vrampilot.errors import UserError
from vrampilot.hardware import GPU_BACKEND_CHOICES, parse_gpu_backend
from vrampilot.units import parse_size

if TYPE_CHECKING:
    from vrampilot.planner.target import TargetRequest


def add_target_options(p: argparse.ArgumentParser) -> None:
    """--gpu, --vram, --cpu-only, --gpu-backend, --margin and --rpc."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", metavar="NAME", help="plan for a GPU profile, e.g. 'RTX 4060 Ti 8GB'")
    where.add_argument("--vram", metavar="SIZE", help="plan for a hypothetical single GPU, e.g. 8GiB")
    where.add_argument("--cpu-only", action="store_true", help="plan without a GPU")
    p.add_argument(
        "--gpu-backend",
        choices=("auto", *GPU_BACKEND_CHOICES),
        default="auto",
        help="the llama.cpp backend that runs a GPU several can drive (an NVIDIA card under CUDA and Vulkan); "
        "auto: the vendor's own (CUDA), which reads prompts faster",
    )
    p.add_argument("--margin", metavar="SIZE", help="VRAM kept free per GPU for the driver (default 1GiB)")
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT[=SIZE],...",
        help="llama.cpp RPC hosts (ggml-rpc-server, `vrampilot rpc-host`) to spread layers over, "
        "each with the memory it may use, e.g. 192.168.1.20:50052=6GiB",
    )


def target_request_from_args(args: argparse.Namespace) -> TargetRequest:
    """The options of add_target_options as one request. Asks each --rpc host what it has (a clear
    error when one does not answer), after the options that cannot go with it are refused."""
    # Here, not above: `hub search` shares this module and needs none of the planner.
    from vrampilot.hardware import find_profile, parse_hosts, query_hosts
    from vrampilot.planner.target import TargetRequest

    try:
        request = TargetRequest(
            cpu_only=args.cpu_only,
            profile=find_profile(args.gpu) if args.gpu else None,
            vram_bytes=parse_size(args.vram) if args.vram else None,
            gpu_backend=parse_gpu_backend(args.gpu_backend),
            margin_bytes=parse_size(args.margin) if args.margin else None,
        )
    except ValueError as exc:  # an unknown profile, a size that does not parse
        raise UserError(str(exc)) from None
    if not args.rpc:
        return request
    request.refuse_rpc_hosts()
    hosts, budgets = query_hosts(parse_hosts(args.rpc))
    return replace(request, rpc_hosts=tuple(hosts), rpc_budget_bytes=budgets)
