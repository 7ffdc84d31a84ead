"""The guard of tests/logfail.py, run as the suite runs (two xdist workers) on tests written here:
an error the product logs, or a worker thread's unhandled exception, fails the test that caused it
unless the test's mark expects it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests import waits

ROOT = Path(__file__).resolve().parents[1]

CASES = """
import logging
import threading

import pytest

log = logging.getLogger("vrampilot.somewhere")


def test_logs_an_error():
    log.error("a worker failed")


def test_logs_an_exception():
    try:
        raise ValueError("bad value")
    except ValueError:
        log.exception("while planning")


def test_a_thread_dies():
    t = threading.Thread(target=lambda: 1 / 0, name="worker")
    t.start()
    t.join()


@pytest.mark.expect_errors(r"vrampilot\\.somewhere: a worker failed")
def test_expects_that_error():
    log.error("a worker failed")


@pytest.mark.expect_errors(r"a worker failed")
def test_expects_another_error():
    log.error("the disk is full")


def test_warnings_and_other_loggers_pass():
    log.warning("a warning")
    logging.getLogger("somebody.else").error("not ours")


@pytest.fixture
def noisy_teardown():
    yield
    log.error("failed while closing")


def test_errors_in_fixture_teardown_count(noisy_teardown):
    pass
"""


def test_logged_errors_and_dead_threads_fail_the_test_unless_expected(tmp_path: Path) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "pytest", "-p", "tests.logfail", "-n", "2", "-rfE", "-p", "no:cacheprovider"]
    r = waits.run([*argv, "-o", "addopts=", str(tmp_path)], cpu_s=120, cwd=tmp_path, env=env)
    out = r.stdout
    errors = {
        line.split("::")[1].split()[0] for line in out.splitlines() if line.startswith(("ERROR test_", "FAILED test_"))
    }
    assert errors == {
        "test_logs_an_error",
        "test_logs_an_exception",
        "test_a_thread_dies",
        "test_expects_another_error",
        "test_errors_in_fixture_teardown_count",
    }, out
    assert "7 passed" in out and "5 errors" in out, out  # a teardown's error: the call itself passed
    assert "ValueError: bad value" in out and "ZeroDivisionError" in out and "the disk is full" in out
    assert "2 workers" in out, out
