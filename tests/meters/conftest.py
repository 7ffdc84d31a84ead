"""The 7B model and its 8 GB plan, built once per session (header-only file, milliseconds)."""

from __future__ import annotations

import pytest

from tests.meters.session import plan_32k, qwen7b
from vrampilot.gguf import ModelSpec
from vrampilot.planner.plan import Plan


@pytest.fixture(scope="session")
def qwen7b_spec(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    return qwen7b(tmp_path_factory.mktemp("meters-model"))


@pytest.fixture(scope="session")
def plan8(qwen7b_spec: ModelSpec) -> Plan:
    return plan_32k(qwen7b_spec)
