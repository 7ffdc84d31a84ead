"""The app's log file, and the one rule for turning an exception into a line for the user.

A bug must not look like a user error with its traceback lost: errors a user can cause are
`UserError`s and their message is shown as it is; anything else is written to the log with its
traceback and shown as "Unexpected error: <one line>; details in the log". The log is a rotating
file in the data folder (Help > Show log in the app), a few MB at most.
"""

from __future__ import annotations

import logging
import logging.handlers
import threading
from pathlib import Path

from vrampilot.errors import UserError
from vrampilot.paths import data_dir

LOG_FILE = "vrampilot.log"
MAX_BYTES = 1 << 20
BACKUPS = 3
_lock = threading.Lock()
_handler: logging.Handler | None = None
_log = logging.getLogger("vrampilot")


class _RotatingLog(logging.handlers.RotatingFileHandler):
    def handleError(self, record: logging.LogRecord) -> None:
        # A log that cannot be written (a full disk) must not print tracebacks of its own.
        pass


def log_path() -> Path:
    return data_dir() / "logs" / LOG_FILE


def setup_logging(path: Path | None = None, level: int = logging.INFO) -> Path:
    """Send the `vrampilot` loggers to the rotating log file (idempotent; a new path replaces the old).

    A log that cannot be written (read-only or full disk) leaves logging to stderr: the app must
    start anyway.
    """
    global _handler
    path = path or log_path()
    with _lock:
        if _handler is not None and getattr(_handler, "baseFilename", None) == str(path):
            return path
        if _handler is not None:
            _log.removeHandler(_handler)
            _handler.close()
            _handler = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler: logging.Handler = _RotatingLog(
                path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8", delay=True
            )
        except OSError:
            handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"))
        _log.addHandler(handler)
        _log.setLevel(min(level, _log.level or level))
        _handler = handler
    return path


def describe_error(exc: BaseException, *, context: str = "") -> str:
    """The line to show for `exc`. A non-user error is logged with its traceback first."""
    if isinstance(exc, UserError):
        return str(exc)
    where = f" while {context}" if context else ""
    _log.error("unexpected error%s", where, exc_info=(type(exc), exc, exc.__traceback__))
    first = (str(exc).strip().splitlines() or [""])[0]
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return f"Unexpected error: {text}; details in the log"


def read_tail(path: Path | None = None, max_bytes: int = 200_000) -> str:
    """The end of the log, for the app's log window."""
    path = path or log_path()
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
