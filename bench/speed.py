"""Predicted against measured speed on this machine, before any reply (probe only) and after three.

What it does, in a temporary data folder of its own (so it starts from a machine nobody measured
and leaves the user's record alone):
1. Runs the speed probe (speed/host_probe.py) once, as the app's first start does, and prints its
   figures and how long it took.
2. Measures llama.cpp through the app's own engine (vrampilot.engine.Engine, the path replies take)
   for every case: the embedded model and three fixture architectures written by testkit
   (a GQA model with biases in Q8_0, a sliding-window model in Q4_0, a mixture of experts in F16,
   each scaled up to 50-200M parameters so that weights, not fixed costs, dominate), at 1 and 2
   threads, at 2K and 8K context. Each measurement is one reply: a prompt filling half the context
   (prefill tokens/s), then `--tokens` generated after it (decode tokens/s). Cases run in
   alternating order over `--rounds` rounds; medians are reported, with the share of the CPU other
   programs used meanwhile.
3. Predicts each case for the same conditions with the probe alone ("before"), and again after
   three replies of a chat with each model on this machine's default plan for it at the case's
   thread count, spread evenly over the rounds, learned from as the app does (planner/calibration.py: the
   backend's factors over every model, and the model's own once it has two) ("after"). The second
   turn pastes a passage, as a user asking about a document does, so prompts are learned from too.
4. Prints predicted / measured per case and kind, and the worst ratio of each phase last.

Run: .venv/bin/python bench/speed.py [--rounds 3] [--tokens 64] [--json bench/out/speed.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIXTURE_DIR = ROOT / "bench" / "out" / "speed-fixtures"
# Three architectures from testkit, scaled up from their tiny test shapes.
FIXTURES: dict[str, dict[str, Any]] = {
    "qwen2 GQA+bias Q8_0": {
        "arch": "qwen2",
        "weight_type": "q8_0",
        "n_layer": 8,
        "n_embd": 768,
        "n_head": 12,
        "n_head_kv": 2,
        "n_ff": 2048,
    },
    "gemma3 SWA Q4_0": {
        "arch": "gemma3",
        "weight_type": "q4_0",
        "n_layer": 12,
        "n_embd": 640,
        "n_head": 4,
        "n_head_kv": 1,
        "head_dim": 256,
        "n_ff": 2048,
    },
    "qwen3moe 16x2 F16": {
        "arch": "qwen3moe",
        "weight_type": "f16",
        "n_layer": 8,
        "n_embd": 512,
        "n_head": 8,
        "n_head_kv": 2,
        "head_dim": 64,
        "n_expert": 16,
        "n_expert_used": 2,
        "n_ff_expert": 768,
    },
}
THREADS = (1, 2)
CONTEXTS = (2048, 8192)
CALIBRATION_TURNS = (
    "Hello! What can you help me with?",
    "Here is a page from my town's records. "
    + " ".join(
        [
            "The river runs past the old mill, where the town keeps its records of every harvest, flood and fair "
            "since the bridge was first built."
        ]
        * 16
    )
    + " What does it say about floods?",
    "Tell me about the history of Paris in a few sentences.",
    "And what is it famous for today?",
    "Thanks. Can you summarise that in one line?",
    "What about Lyon?",
    "Which one would you visit first?",
)
CALIBRATION_REPLIES = 3
LIMITS = {"before": 0.25, "after": 0.15}
FILLER = (
    "The river runs past the old mill, where the town keeps its records of every harvest, flood and "
    "fair since the bridge was first built. "
)


def fixture(name: str) -> Path:
    """The fixture file, written once (python quantization takes a few seconds per model)."""
    from testkit.gguf_models import write_model

    spec = dict(FIXTURES[name])
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    path = FIXTURE_DIR / f"{spec['arch']}-{key}.gguf"
    if not path.is_file():
        FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
        arch = spec.pop("arch")
        tmp = path.with_suffix(".part")
        write_model(tmp, arch, tokenizer="smollm2", **spec)
        tmp.replace(path)
    return path


@dataclass
class Case:
    model: str
    path: Path
    threads: int
    n_ctx: int
    prefill_tps: list[float] = field(default_factory=list)
    decode_tps: list[float] = field(default_factory=list)
    others: list[float] = field(default_factory=list)
    ram_gbps: list[float] = field(default_factory=list)  # the drift gauge right before each reply
    stats: Any = None  # the last reply's GenerationStats (the conditions predicted for)

    @property
    def label(self) -> str:
        return f"{self.model:<22} {self.threads}T {self.n_ctx // 1024}K"


def parse_label(label: str) -> tuple[str, int, int]:
    """(model, threads, n_ctx) of a case's label (`Case.label`), as a saved run holds it."""
    model, rest = label[:22].strip(), label[22:].split()
    return model, int(rest[0][:-1]), int(rest[1][:-1]) * 1024


def replayed_before(spec: Any, target: Any, row: dict[str, Any]) -> float:
    """Predicted / measured for a saved run's row, predicted again for `spec` on `target` before any
    reply (what experiments replay a change of the speed model with)."""
    from vrampilot.planner.calibration import ReplyMeasurement, reply_prediction
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan

    _, threads, n_ctx = parse_label(row["case"])
    p = plan(spec, target, Pins(n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads))
    n = row["prompt_tokens"]
    pred = reply_prediction(p, ReplyMeasurement(n, n, row["generated"], 0.0, 0.0), calibrated=False)
    ratio: float = float(pred.decode_tps if row["kind"] == "decode" else pred.prefill_tps) / row["measured_tps"]
    return ratio


def prompt_for(engine: Any, n_tokens: int, round_no: int) -> list[Any]:
    """A user message whose rendered prompt is about n_tokens long, different in every round (so
    nothing is reused from the previous reply's cache)."""
    from vrampilot.engine import Message

    head = f"Round {round_no}: read this, then retell it at length. "
    text = head + FILLER
    while len(engine.tokenize_prompt([Message("user", text)])) < n_tokens:
        text += FILLER
    while len(engine.tokenize_prompt([Message("user", text)])) > n_tokens:
        if len(text) <= len(head):  # the template and the head alone are longer: as short as it gets
            break
        text = text[: max(len(head), len(text) - 40)]
    return [Message("user", text)]


class Calibration:
    """Replies a user would get on this machine's default plan of one model at one thread count, one
    turn of one conversation at a time, each learned from as the app does (planner/calibration.py):
    into the backend's factors over every model and into the model's own. The app keeps those
    factors per CPU thread setting (factors learned at 2 threads moved 1-thread cases away from what
    they measured), so each thread count the cases run at has its own chat: the user who runs a
    model at 1 thread gets 1-thread replies. The bench spreads the replies over its rounds, as a
    user's replies are spread over time: a machine whose speed drifts (a VM's neighbours) teaches
    its typical state, not one moment's."""

    def __init__(self, machine: Any, path: Path, threads: int) -> None:
        from vrampilot.gguf import load_model_spec
        from vrampilot.planner.plan import Pins
        from vrampilot.planner.search.choose import plan
        from vrampilot.planner.target import TargetRequest, resolve_target

        self.path = path
        spec, target = load_model_spec(path), resolve_target(TargetRequest(), machine.machine, machine.speed)
        self.plan = plan(spec, target, exact=True)
        if (self.plan.settings.n_threads, self.plan.settings.n_threads_batch) != (threads, threads):
            self.plan = plan(spec, target, Pins(n_threads=threads, n_threads_batch=threads), exact=True)
        self.threads = threads
        self.fingerprint = machine.speed.fingerprint
        self.messages: list[Any] = []
        self.log: list[dict[str, Any]] = []

    def _own(self, speed: Any) -> Any:
        from vrampilot.planner.speed_model.predict import backend_key

        return speed.factors_for(backend_key(self.plan.target, self.plan.settings), self.path.name)

    @property
    def learned(self) -> int:
        from vrampilot.speed import load_machine_speed

        # This model's replies learned from at all (a chat's short prompts teach generating only).
        return int(self._own(load_machine_speed(self.fingerprint)).n_replies)

    def reply(self) -> None:
        from vrampilot.engine import Engine, Message, SamplingParams
        from vrampilot.planner.calibration import record_reply, reply_pace_ms
        from vrampilot.speed import cpu_snapshot, load_machine_speed, others_cpu_share

        text = CALIBRATION_TURNS[len(self.log) % len(CALIBRATION_TURNS)]
        self.messages.append(Message("user", text))
        engine = Engine()
        engine.load(self.plan)
        try:
            start = cpu_snapshot()
            reply = engine.chat(self.messages, SamplingParams(temperature=0.7, max_tokens=96, seed=len(self.messages)))
            share = others_cpu_share(start)
        finally:
            engine.unload()
        self.messages.append(Message("assistant", reply.text))
        s = reply.stats
        # The whole conversation is read again (the engine was reloaded), as after an app restart.
        # The pace gauge right after the reply, as the app reads it (speed/pace.py).
        measured = s.measurement(share, reply_pace_ms(self.plan))
        speed = record_reply(load_machine_speed(self.fingerprint), self.plan, measured)
        factors, last = self._own(speed), speed.last_replies[-1]
        self.log.append(
            {
                "model": self.path.name,
                "threads": self.threads,
                "prompt_tokens": s.evaluated_tokens,
                "generated": s.completion_tokens,
                "decode_tps": round(s.decode_tps, 1),
                "prefill_tps": round(s.prefill_tps, 1),
                "others": round(share, 3),
                "pace_ms": measured.pace_ms,
                "pace_share": last.pace_share,
                "set_aside": last.set_aside,
                "learned_decode": len(factors.decode_ratios),
                "learned_prefill": len(factors.prefill_ratios),
            }
        )
        pace = f", pace {last.pace_share:.2f} of usual" if last.pace_share is not None else ""
        aside = f"; not learned from: {last.set_aside}" if last.set_aside else ""
        print(
            f"  reply {len(self.log)} of {self.path.name} at {self.threads}T: {s.evaluated_tokens} prompt tokens at {s.prefill_tps:.0f} "
            f"tokens/s, {s.completion_tokens} generated at {s.decode_tps:.1f} tokens/s (others {share:.0%}{pace}){aside}; "
            f"its own: {len(factors.decode_ratios)} decode, {len(factors.prefill_ratios)} prefill",
            flush=True,
        )


def ram_gauge() -> float:
    """1-thread RAM read, GB/s, the mean of three passes (not the best: a slow moment should show).
    A gauge of how fast this machine is right now: on a VM whose neighbours share the memory
    bus and cores, llama.cpp ran 1.5-2x slower for minutes with no other program in sight (others
    0-1% of the CPU, steal included), and this gauge fell with it (37 to 26 GB/s at 2 threads)."""
    import time

    import numpy as np

    from vrampilot.speed import stream_bytes

    a = np.ones(stream_bytes() // 8, dtype=np.float64)
    np.sum(a)  # touch it once
    t0 = time.perf_counter()
    for _ in range(3):
        np.sum(a)
    return 3 * a.nbytes / (time.perf_counter() - t0) / 1e9


def measure(cases: list[Case], machine: Any, rounds: int, n_decode: int, calibrations: list[Calibration]) -> None:
    from vrampilot.engine import Engine, SamplingParams
    from vrampilot.gguf import load_model_spec
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan
    from vrampilot.planner.target import TargetRequest, resolve_target
    from vrampilot.speed import cpu_snapshot, others_cpu_share

    # The app's default sampling (the sampler's pass over the logits is part of every token's cost),
    # with a fixed seed.
    sampling = SamplingParams(max_tokens=n_decode, seed=1)
    for r in range(rounds):
        order = cases if r % 2 == 0 else list(reversed(cases))
        for c in order:
            p = plan(
                load_model_spec(c.path),
                resolve_target(TargetRequest(cpu_only=True), machine.machine, machine.speed),
                Pins(n_ctx=c.n_ctx, n_threads=c.threads, n_threads_batch=c.threads),
            )
            engine = Engine()
            engine.load(p)
            try:
                messages = prompt_for(engine, c.n_ctx // 2, r)
                c.ram_gbps.append(ram_gauge())
                start = cpu_snapshot()
                reply = engine.chat(messages, sampling)
                c.others.append(others_cpu_share(start))
            finally:
                engine.unload()
            c.prefill_tps.append(reply.stats.prefill_tps)
            c.decode_tps.append(reply.stats.decode_tps)
            c.stats = reply.stats
            print(
                f"  round {r + 1}: {c.label}  prefill {reply.stats.prefill_tps:7.1f}  decode {reply.stats.decode_tps:6.1f}"
                f"  ({reply.stats.evaluated_tokens} prompt tokens, {reply.stats.completion_tokens} generated, "
                f"others {c.others[-1]:.0%}, RAM gauge {c.ram_gbps[-1]:.1f} GB/s)",
                flush=True,
            )
        # The user's chat with each model at each thread count: CALIBRATION_REPLIES replies spread
        # evenly over the rounds (one after each of three; after the second, fourth and fifth of
        # five), so that more rounds steady what is measured without teaching more replies.
        due = CALIBRATION_REPLIES * (r + 1) // rounds - CALIBRATION_REPLIES * r // rounds
        for calibration in calibrations:
            for _ in range(due):
                calibration.reply()
            # More, up to every turn there is, when one was set aside (a busy machine, a short reply).
            while (
                r == rounds - 1
                and calibration.learned < CALIBRATION_REPLIES
                and len(calibration.log) < len(CALIBRATION_TURNS)
            ):
                calibration.reply()


def predict(cases: list[Case], machine: Any) -> list[dict[str, Any]]:
    from vrampilot.gguf import load_model_spec
    from vrampilot.planner.calibration import ReplyMeasurement, reply_prediction
    from vrampilot.planner.plan import Pins
    from vrampilot.planner.search.choose import plan
    from vrampilot.planner.target import TargetRequest, resolve_target

    out = []
    for c in cases:
        p = plan(
            load_model_spec(c.path),
            resolve_target(TargetRequest(cpu_only=True), machine.machine, machine.speed),
            Pins(n_ctx=c.n_ctx, n_threads=c.threads, n_threads_batch=c.threads),
        )
        s = c.stats
        m = ReplyMeasurement(s.prompt_tokens, s.evaluated_tokens, s.completion_tokens, 0.0, 0.0)
        pred = reply_prediction(p, m)
        out.append({"decode_tps": pred.decode_tps, "prefill_tps": pred.prefill_tps})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per measurement")
    ap.add_argument("--models", help="comma-separated subset: embedded and/or fixture names' first word")
    ap.add_argument("--threads", default=",".join(map(str, THREADS)), help="thread counts (default 1,2)")
    ap.add_argument("--contexts", default=",".join(map(str, CONTEXTS)), help="context sizes (default 2048,8192)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    os.environ["VRAMPILOT_HOME"] = tempfile.mkdtemp(prefix="vrampilot-bench-speed-")

    from vrampilot.gguf import load_model_spec
    from vrampilot.paths import embedded_model_path
    from vrampilot.planner.speed_model.cpu_speed import weight_table
    from vrampilot.speed import CORE_WEIGHT_TYPES, MeasuredMachine, detect_measured_machine, format_probe, probe_machine

    embedded = embedded_model_path()
    assert embedded is not None
    models: dict[str, Path] = {"SmolLM2-135M Q4_1/Q8_0": embedded}
    for name in FIXTURES:
        models[name] = fixture(name)
    if args.models:
        wanted = [w.strip().lower() for w in args.models.split(",")]
        models = {
            k: v
            for k, v in models.items()
            if any(k.lower().startswith(w) or (w == "embedded" and v == embedded) for w in wanted)
        }

    found = detect_measured_machine()
    assert found.speed is not None  # this machine as detected always has its record
    types = list(CORE_WEIGHT_TYPES) + [t for p in models.values() for t in weight_table(load_model_spec(p)).types()]
    print("1. Speed probe (what the app's first start runs)", flush=True)
    probed = probe_machine(found.machine, found.speed, types)
    probe = probed.taken
    machine = MeasuredMachine(found.machine, probed.speed)
    print("\n".join(format_probe(probe)), flush=True)
    gauge_at_probe = ram_gauge()
    print(f"  RAM gauge right after the probe: {gauge_at_probe:.1f} GB/s (1 thread, mean of three passes)", flush=True)

    threads = [int(x) for x in args.threads.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    cases = [Case(name, path, t, n) for name, path in models.items() for t in threads for n in contexts]
    print(
        f"\n2. Measuring {len(cases)} cases, {args.rounds} alternating rounds; spread over them, three replies of a "
        "chat with each model on this machine's default plan for it at each thread count, learned from",
        flush=True,
    )
    calibrations = [Calibration(machine, path, t) for path in models.values() for t in threads]
    measure(cases, machine, args.rounds, args.tokens, calibrations)
    from vrampilot.speed import load_machine_speed

    before = predict(cases, machine)
    after = predict(cases, replace(machine, speed=load_machine_speed(probed.speed.fingerprint)))
    replies = [entry for c in calibrations for entry in c.log]

    rows = []
    print(
        f"\n{'case':<30} {'kind':<8} {'measured':>9} {'before':>8} {'ratio':>6} {'after':>8} {'ratio':>6}  others"
        "  RAM gauge vs probe"
    )
    for c, b, a in zip(cases, before, after, strict=True):
        for kind, measured in (
            ("prefill", statistics.median(c.prefill_tps)),
            ("decode", statistics.median(c.decode_tps)),
        ):
            rb, ra = b[f"{kind}_tps"] / measured, a[f"{kind}_tps"] / measured
            rows.append(
                {
                    "case": c.label,
                    "kind": kind,
                    "measured_tps": measured,
                    "before_tps": b[f"{kind}_tps"],
                    "before_ratio": rb,
                    "after_tps": a[f"{kind}_tps"],
                    "after_ratio": ra,
                    "others_cpu_share": max(c.others),
                    "prompt_tokens": c.stats.evaluated_tokens,
                    "generated": c.stats.completion_tokens,
                    "ram_gauge_gbps": c.ram_gbps,
                }
            )
            gauge = f"{min(c.ram_gbps) / gauge_at_probe:.2f}-{max(c.ram_gbps) / gauge_at_probe:.2f}"
            print(
                f"{c.label:<30} {kind:<8} {measured:9.1f} {b[f'{kind}_tps']:8.1f} {rb:6.2f} {a[f'{kind}_tps']:8.1f} "
                f"{ra:6.2f}  {max(c.others):>5.0%}  {gauge}"
            )

    def worst(phase: str) -> tuple[float, dict[str, Any]]:
        key = f"{phase}_ratio"
        row = max(rows, key=lambda r: abs(r[key] - 1.0))
        return row[key], row

    summary: dict[str, Any] = {}
    print()
    gauges = [g for c in cases for g in c.ram_gbps]
    summary["ram_gauge"] = {"at_probe_gbps": gauge_at_probe, "min_gbps": min(gauges), "max_gbps": max(gauges)}
    print(
        f"RAM gauge before each reply: {min(gauges):.1f}-{max(gauges):.1f} GB/s, {gauge_at_probe:.1f} right after the "
        f"probe ({min(gauges) / gauge_at_probe:.2f}-{max(gauges) / gauge_at_probe:.2f} of it): how far the machine "
        "itself moved during the run"
    )
    # How far apart one case's rounds read (fastest / slowest): the measurement's own noise, which
    # no prediction made once for the whole run can follow.
    spreads = sorted(max(v) / min(v) for c in cases for v in (c.prefill_tps, c.decode_tps) if min(v) > 0)
    if spreads:
        summary["round_spread"] = {"median": statistics.median(spreads), "max": spreads[-1]}
        print(
            f"one case's rounds read up to {spreads[-1]:.2f}x apart (fastest / slowest; median case "
            f"{statistics.median(spreads):.2f}x)"
        )
    for phase in ("before", "after"):
        held = sum(1 for r in rows if abs(r[f"{phase}_ratio"] - 1.0) <= LIMITS[phase])
        print(f"{phase:>6}: {held} of {len(rows)} within ±{LIMITS[phase]:.0%}")
        summary[phase] = {"within": held, "of": len(rows), "limit": LIMITS[phase]}
    for phase, what in (("before", "before calibration (probe only)"), ("after", "after three replies")):
        ratio, row = worst(phase)
        summary[phase]["worst"] = {"ratio": ratio, "case": row["case"], "kind": row["kind"]}
        print(f"worst ratio {what}: {ratio:.2f} ({row['case']}, {row['kind']})")
    if args.json:
        from vrampilot.speed import encode_record

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"probe": encode_record(probe), "calibration_replies": replies, "rows": rows, "summary": summary},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
