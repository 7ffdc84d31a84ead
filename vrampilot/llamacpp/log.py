"""llama.cpp's log, kept in memory instead of printed.

llama.cpp reports why a load failed (e.g. "failed to allocate CPU buffer of size ...") only in its
log. The engine quotes the last error lines in the message the user sees; everything else goes to
Python logging at debug level, so the terminal stays clean.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import threading
from collections.abc import Iterator
from typing import Any

import llama_cpp

_log = logging.getLogger("vrampilot.llamacpp")
_lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=200)
_lock = threading.Lock()
_installed = False
_partial: list[str] = []
_captures: list[list[str]] = []  # every line, for as long as `capturing` lasts

# enum ggml_log_level in ggml.h (llama-cpp-python's _logger.py still lists an older order)
GGML_LOG_LEVEL_DEBUG = 1
GGML_LOG_LEVEL_INFO = 2
GGML_LOG_LEVEL_WARN = 3
GGML_LOG_LEVEL_ERROR = 4
GGML_LOG_LEVEL_CONT = 5


@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]  # ctypes CFUNCTYPE: a C function pointer
def _callback(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    msg = text.decode("utf-8", errors="replace")
    with _lock:
        _partial.append(msg)
        if not msg.endswith("\n"):
            return
        line = "".join(_partial).rstrip()
        _partial.clear()
        if level != GGML_LOG_LEVEL_CONT:
            _lines.append((level, line))
            for capture in _captures:
                capture.append(line)
    if level == GGML_LOG_LEVEL_ERROR:
        _log.info("%s", line)
    else:
        _log.debug("%s", line)


def install() -> None:
    """Route llama.cpp's log here (idempotent; the callback object lives as long as the module)."""
    global _installed
    if not _installed:
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
        _installed = True


_mtmd_installed = False


def install_mtmd(mtmd_cpp: Any) -> None:
    """Route libmtmd's log (clip.cpp's load report, its errors) here too (idempotent)."""
    global _mtmd_installed
    if not _mtmd_installed:
        mtmd_cpp.mtmd_log_set(_callback, ctypes.c_void_p(0))
        mtmd_cpp.mtmd_helper_log_set(_callback, ctypes.c_void_p(0))  # its image decoding helpers
        _mtmd_installed = True


def recent_errors(limit: int = 2) -> list[str]:
    """The last error lines, oldest first, without llama.cpp's function-name prefixes."""
    with _lock:
        picked = [line for lvl, line in _lines if lvl == GGML_LOG_LEVEL_ERROR]
    return [line.split(": ", 1)[-1] for line in picked[-limit:]]


def clear() -> None:
    with _lock:
        _lines.clear()
        _partial.clear()


@contextlib.contextmanager
def capturing() -> Iterator[list[str]]:
    """Every line llama.cpp logs while the block runs (the recent-lines buffer keeps only the last
    200, and a model's load logs more: its buffer lines would be gone by its end)."""
    lines: list[str] = []
    with _lock:
        _captures.append(lines)
    try:
        yield lines
    finally:
        with _lock:
            _captures.remove(lines)
