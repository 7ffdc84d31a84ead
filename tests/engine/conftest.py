"""Engine tests run real llama.cpp on the embedded SmolLM2-135M (94 MB, CPU)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vrampilot.engine import Engine, SamplingParams
from vrampilot.gguf import ModelSpec, load_model_spec
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import Target, TargetRequest, resolve_target
from vrampilot.speed import detect_measured_machine

# One thread: on a busy 2-core machine llama.cpp's worker threads spin-wait on each other and a
# test that should take a second takes a minute.
ONE_THREAD = {"n_threads": 1, "n_threads_batch": 1}
GREEDY = SamplingParams(temperature=0.0, max_tokens=24, seed=1)


@pytest.fixture(scope="session")
def spec(embedded_model: Path) -> ModelSpec:
    return load_model_spec(embedded_model)


@pytest.fixture(scope="session")
def cpu_target() -> Target:
    found = detect_measured_machine()
    return resolve_target(TargetRequest(cpu_only=True), found.machine, found.speed)


def make_plan(spec: ModelSpec, target: Target, **pins: object) -> Plan:
    merged = {"n_ctx": 1024, **ONE_THREAD, **pins}
    return plan(spec, target, Pins(**merged))  # type: ignore[arg-type]  # a dict of the fields; mypy cannot match **dict to each


@pytest.fixture(scope="module")
def engine(spec: ModelSpec, cpu_target: Target) -> Iterator[Engine]:
    e = Engine()
    e.load(make_plan(spec, cpu_target))
    yield e
    e.unload()
