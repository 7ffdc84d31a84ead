"""`vrampilot monitor [--json] [--seconds N] [--interval S] [--pid PID]`: the meters' readings, one line each.

The same Sampler as the app's meter panel. Watching another process (`--pid`, e.g. llama-server or
the app itself) gives its RAM, CPU and, where NVML lists it, its VRAM; the default is this process,
which is only useful for the machine-wide readings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import psutil

from vrampilot.errors import UserError
from vrampilot.meters.report import format_sample, sample_to_dict
from vrampilot.meters.sampler import MAX_INTERVAL_S, MIN_INTERVAL_S, Sampler, describe_sampler


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("monitor", help="print live VRAM, RAM, PCIe and CPU readings, one line per sample")
    p.add_argument("--json", action="store_true", help="one JSON object per line (JSON Lines)")
    p.add_argument("--seconds", type=float, metavar="N", help="stop after N seconds (default: until Ctrl-C)")
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help=f"seconds between samples (default 1, {MIN_INTERVAL_S}-{MAX_INTERVAL_S})",
    )
    p.add_argument("--pid", type=int, help="process to watch (default: this one)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.seconds is not None and args.seconds <= 0:
        raise UserError("--seconds must be positive")
    try:
        sampler = Sampler(interval_s=args.interval, pid=args.pid)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        sampler.open()
    except psutil.NoSuchProcess:
        raise UserError(f"no process with pid {args.pid}") from None
    except psutil.AccessDenied:
        raise UserError(f"not allowed to read process {args.pid}") from None
    try:
        if args.json:
            print(json.dumps({"monitor": describe_sampler(sampler)}), flush=True)
        else:
            names = ", ".join(f"GPU{d.index} {d.name}" for d in sampler.devices)
            print(f"# {sampler.gpu_status}" + (f": {names}" if names else ""), flush=True)
        return _loop(sampler, args)
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how a monitor is meant to end
    finally:
        sampler.close()


def _loop(sampler: Sampler, args: argparse.Namespace) -> int:
    start = time.monotonic()
    next_at = start
    while True:
        try:
            sample = sampler.sample_once()
        except psutil.NoSuchProcess:
            print(f"# process {sampler.pid} has exited", file=sys.stderr)
            return 0
        print(json.dumps(sample_to_dict(sample)) if args.json else format_sample(sample), flush=True)
        next_at += sampler.interval_s
        if args.seconds is not None and next_at - start >= args.seconds:
            return 0
        time.sleep(max(0.0, next_at - time.monotonic()))
