"""A test fails on any error the product logs or any exception a worker thread leaves unhandled.

The app's rule (vrampilot/log.py) is that anything a user did not cause is logged with its
traceback and shown as "Unexpected error"; the view stays usable, so a test that only checks the
view passes while a worker logs a bug. This guard (after qutebrowser's tests/helpers/logfail.py)
fails such a test instead: a record at ERROR or above from a `vrampilot.*` logger, or an exception
that ends a `threading.Thread` (threading.excepthook), during the test or its fixtures. Exceptions
raised in Qt slots are pytest-qt's to catch (sys.excepthook; it fails the test already).

A test that provokes an error on purpose says which, narrowly, by patterns searched for (re.search)
in "logger: message" followed by the exception's type and text:

    @pytest.mark.expect_errors(r"vrampilot\\.speed\\.store: kept machine-speed\\.json")

Errors matching none of its patterns still fail it. The guard lives in each test process, so it
works the same under pytest-xdist's workers.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from collections.abc import Iterator

import pytest

MARK = "expect_errors"
PRODUCT_LOGGER = "vrampilot"


def describe_record(record: logging.LogRecord) -> str:
    text = f"{record.name}: {record.getMessage()}"
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        text += f"\n{type(exc).__name__}: {exc}"
    return text


class _Collect(logging.Handler):
    def __init__(self, caught: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.caught = caught

    def emit(self, record: logging.LogRecord) -> None:
        self.caught.append(describe_record(record))


def expected_patterns(node: pytest.Item) -> list[re.Pattern[str]]:
    return [re.compile(p) for mark in node.iter_markers(MARK) for p in mark.args]


@pytest.fixture(autouse=True)
def product_errors_fail_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Collects the product's errors while the test and its fixtures run (autouse, set up before
    the test's own fixtures and torn down after them), then fails the test on any not expected."""
    caught: list[str] = []
    handler = _Collect(caught)
    product = logging.getLogger(PRODUCT_LOGGER)
    product.addHandler(handler)
    before = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "?"
        tb = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
        caught.append(f"unhandled in thread {name}: {args.exc_type.__name__}: {args.exc_value}\n{tb}")
        before(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = before
        product.removeHandler(handler)
    allowed = expected_patterns(request.node)
    unexpected = [c for c in caught if not any(p.search(c) for p in allowed)]
    if unexpected:
        pytest.fail(
            "an error the product logged, or a thread did not handle, that this test does not expect "
            f"(mark the test @pytest.mark.{MARK}(pattern) if it provokes it):\n" + "\n---\n".join(unexpected),
            pytrace=False,
        )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(*patterns): the test provokes product errors matching these regular expressions "
        "(tests/logfail.py fails a test on any other error the product logs)",
    )
