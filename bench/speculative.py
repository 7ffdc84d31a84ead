"""Speculative decoding measured: decode speed with and without drafting, the plan's predicted
speed-up next to the measured one, and the plan's draft bytes next to llama.cpp's, per device.

Each case starts two bundled llama-servers from the plan's own arguments, one without drafting (the
baseline) and one with it, and alternates greedy completions between them (`--rounds`), so machine
noise hits both alike; the ratio is of the medians of the servers' own decode rates (`timings`).

    python bench/speculative.py [--rounds 3] [--tokens 96] [--threads 1]

Cases, on the embedded SmolLM2-135M:
  self-draft   the model drafting for itself (the control: every draft is accepted, and a draft as
               slow as the model can only lose; the prediction must say so)
  ngram        prompt-lookup drafting on a repetitive prompt (no draft model, no memory)

The prediction is printed twice: from the prior acceptance the plan starts with, and from the
acceptance this run measured (what the plan predicts once replies taught it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testkit.spec_server import Served, serving  # noqa: E402
from vrampilot.gguf import load_model_spec  # noqa: E402
from vrampilot.paths import embedded_model_path  # noqa: E402
from vrampilot.planner.plan import Pins, Plan  # noqa: E402
from vrampilot.planner.search.draft import DraftRequest, plan_with_draft  # noqa: E402
from vrampilot.planner.target import TargetRequest, resolve_target  # noqa: E402
from vrampilot.speed import (  # noqa: E402
    Acceptance,
    detect_measured_machine,
    p_from_rate,
)
from vrampilot.units import MIB  # noqa: E402

COUNTING = "Continue the list: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
REPEATING = (
    "Copy this text exactly, three times:\n"
    "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat.\n"
    "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat.\n"
)


@dataclass(frozen=True)
class Case:
    name: str
    request: DraftRequest
    prompt: str


@dataclass(frozen=True)
class Result:
    case: Case
    base_tps: float
    draft_tps: float
    drafted: int
    accepted: int
    predicted_prior: float
    predicted_measured: float
    acceptance_p: float
    bytes_rows: list[tuple[str, int, int]]  # device, plan, llama.cpp


def _decode_tps(served: Served, prompt: str, n: int) -> tuple[float, int, int]:
    t = served.complete(prompt, n)["timings"]
    return float(t["predicted_per_second"]), int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))


def draft_bytes_rows(p: Plan, draft_buffers: dict[str, dict[str, int]]) -> list[tuple[str, int, int]]:
    """Per device: the plan's draft bytes, llama-server's for the draft it loaded (its model
    buffers named by buffer type, CPU_Mapped and CPU_REPACK, count as the CPU's)."""
    assert p.draft is not None
    served: dict[str, int] = {}
    for sizes in draft_buffers.values():
        for name, n in sizes.items():
            device = "CPU" if name.startswith("CPU") else name.removesuffix("_Host")
            if name.endswith("_Host"):
                device = "CPU"
            served[device] = served.get(device, 0) + n
    planned = p.draft.bytes_by_device()
    return [(d, planned.get(d, 0), served.get(d, 0)) for d in sorted(set(planned) | set(served))]


def run_case(case: Case, pins: Pins, rounds: int, n_tokens: int) -> Result:
    spec = load_model_spec(embedded_model_path() or "")
    found = detect_measured_machine()
    target = resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed)
    drafted_plan = plan_with_draft(spec, target, pins, case.request, exact=True)
    assert drafted_plan.draft is not None
    base_settings = replace(drafted_plan.settings, spec_type="", draft_n_max=0)
    base, fast, drafted, accepted = [], [], 0, 0
    with serving(spec.path, base_settings) as s0, serving(spec.path, drafted_plan.settings) as s1:
        _, draft_buffers = s1.buffers()
        _decode_tps(s0, case.prompt, 8)  # warm both: the first request pays for page faults
        _decode_tps(s1, case.prompt, 8)
        for _ in range(rounds):
            base.append(_decode_tps(s0, case.prompt, n_tokens)[0])
            tps, d, a = _decode_tps(s1, case.prompt, n_tokens)
            fast.append(tps)
            drafted += d
            accepted += a
    n = drafted_plan.settings.draft_n_max
    p = p_from_rate(accepted / drafted, n) if drafted else 0.0
    learned = plan_with_draft(
        spec, target, pins, replace(case.request, n_draft=n), acceptance=Acceptance(p, rounds, drafted, accepted)
    )
    assert learned.draft is not None
    return Result(
        case=case,
        base_tps=statistics.median(base),
        draft_tps=statistics.median(fast),
        drafted=drafted,
        accepted=accepted,
        predicted_prior=drafted_plan.draft.speedup,
        predicted_measured=learned.draft.speedup,
        acceptance_p=p,
        bytes_rows=draft_bytes_rows(drafted_plan, draft_buffers) if drafted_plan.draft.spec is not None else [],
    )


def format_results(results: list[Result], n_draft: dict[str, int]) -> str:
    lines = [
        "decode tokens/s (medians, llama-server's own timings); speed-up = drafted / baseline, same run",
        f"{'case':<11} {'draft':>5} {'base':>7} {'drafted':>8} {'measured':>9} {'pred(prior)':>12} "
        f"{'pred(measured acc)':>19} {'accepted':>14} {'p/token':>8}",
    ]
    for r in results:
        rate = f"{r.accepted}/{r.drafted}" if r.drafted else "0/0"
        lines.append(
            f"{r.case.name:<11} {n_draft[r.case.name]:>5} {r.base_tps:>7.1f} {r.draft_tps:>8.1f} "
            f"{r.draft_tps / r.base_tps if r.base_tps else 0:>8.2f}x {r.predicted_prior:>11.2f}x "
            f"{r.predicted_measured:>18.2f}x {rate:>14} {r.acceptance_p:>8.2f}"
        )
    rows = [(r.case.name, *row) for r in results for row in r.bytes_rows]
    if rows:
        lines += ["", "draft model bytes per device: plan vs llama-server's buffer lines for the draft"]
        lines.append(f"{'case':<11} {'device':<10} {'plan MiB':>10} {'llama.cpp MiB':>14} {'diff bytes':>11}")
        for name, dev, planned, real in rows:
            lines.append(f"{name:<11} {dev:<10} {planned / MIB:>10.2f} {real / MIB:>14.2f} {planned - real:>11}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    model = embedded_model_path()
    if model is None:
        print("the embedded model is not installed", file=sys.stderr)
        return 1
    pins = Pins(n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads)
    cases = [
        Case("self-draft", DraftRequest("draft", model, n_draft=4), COUNTING),
        Case("ngram", DraftRequest("ngram", n_draft=8), REPEATING),
    ]
    results = [run_case(c, pins, args.rounds, args.tokens) for c in cases]
    print(format_results(results, {c.name: c.request.n_draft or 0 for c in cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
