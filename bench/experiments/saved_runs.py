"""What the replay experiments share: a saved bench/speed.py run's models and its calibration
replies learned again, as the app learns them, with the code as it is now (issue #19)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any


def bench_specs() -> tuple[dict[str, Any], dict[str, Any]]:
    """The bench's models by case name and by file name (the fixtures written if missing)."""
    import speed as bench  # bench/speed.py

    from vrampilot.gguf import load_model_spec
    from vrampilot.paths import embedded_model_path

    paths = {"SmolLM2-135M Q4_1/Q8_0": embedded_model_path(), **{n: bench.fixture(n) for n in bench.FIXTURES}}
    specs = {k: load_model_spec(v) for k, v in paths.items()}
    return specs, {s.path.name: s for s in specs.values()}


def learn_saved_replies(data: dict[str, Any], machine: Any, by_file: dict[str, Any],
                        per_chat: int | None = None) -> tuple[Any, int]:  # fmt: skip
    """`machine`'s speed record with the run's calibration replies learned in order, each chat
    stopping once `per_chat` were learned from (None: every reply, as saved); and how many the pace
    gauge set aside."""
    from vrampilot.planner.calibration import ReplyMeasurement, learn_reply
    from vrampilot.planner.search import Pins, plan
    from vrampilot.planner.target import target_from_machine

    speed = machine.speed
    learned: dict[tuple[str, int], int] = {}
    aside = 0
    for i, e in enumerate(data["calibration_replies"]):
        chat = (e["model"], e["threads"])
        if per_chat is not None and learned.get(chat, 0) >= per_chat:
            continue
        spec, t = by_file[e["model"]], e["threads"]
        p = plan(spec, target_from_machine(replace(machine, speed=speed)), Pins(n_threads=t, n_threads_batch=t),
                 exact=True)  # fmt: skip
        # The engine was reloaded for every turn: the whole conversation was read.
        reply = ReplyMeasurement(e["prompt_tokens"], e["prompt_tokens"], e["generated"], e["decode_tps"],
                                 e["prefill_tps"], e.get("others"), e.get("pace_ms"))  # fmt: skip
        speed = learn_reply(speed, p, reply, at=f"2026-12-02T00:{i // 60:02d}:{i % 60:02d}+00:00")
        why = speed.last_replies[-1].set_aside
        learned[chat] = learned.get(chat, 0) + (not why)
        aside += "pace" in why
    return speed, aside
