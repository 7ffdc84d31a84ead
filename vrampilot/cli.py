"""Command line: `vrampilot [gui]`, `doctor`, `inspect`, `plan`, `export`, and what features add.

Each module in `vrampilot.commands` registers its subcommand with `add_parser(subparsers)` and
handles it in `run(args) -> int`; this file only wires them, turns user errors into one-line
messages, and keeps control characters off the terminal: model names, metadata keys, file names
and replies come from files anyone can write, and an escape sequence in them would otherwise act
on the user's terminal (set its clipboard with OSC 52, rewrite the screen, retitle the window).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from vrampilot import __version__
from vrampilot.errors import UserError

# The commands each module adds, in --help's order. A command line that names one imports only its
# module: the others' imports (the Hub client, the planner, numpy) cost a third of a second of CPU
# at every start.
_COMMANDS = {
    "doctor": "vrampilot.commands.doctor",
    "inspect": "vrampilot.commands.inspect",
    "plan": "vrampilot.commands.plan",
    "export": "vrampilot.commands.plan",
    "chat": "vrampilot.commands.chat",
    "serve": "vrampilot.commands.serve",
    "rpc-host": "vrampilot.commands.rpc_host",
    "monitor": "vrampilot.commands.monitor",
    "hub": "vrampilot.commands.hub",
    "hybrid-eval": "vrampilot.commands.hybrid_eval",
}
# The modules providing add_parser(subparsers) and run(args), in --help's order.
_COMMAND_MODULES = tuple(dict.fromkeys(_COMMANDS.values()))

_OPTIONAL_PACKAGES = ("vrampilot.hybrid",)

# A file or folder the user's system will not let us write: a read-only mount, a full disk, a
# quota, permissions. A user can fix each; it is said in one line, like a UserError.
_CANNOT_WRITE = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM}


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors in one line (not a usage block) and exit status 2, and values that
    start with a minus and a digit (`--vram -1GiB`) taken as values, so that the option's own check
    says what is wrong with them instead of "expected one argument"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # ArgumentParser's own, passed through
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\d")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser: every command's, or (given the command line) only the command it names, so a
    start imports what that command needs (--help and a mistyped command still list them all)."""
    parser = OneLineParser(
        prog="vrampilot",
        description="Plan, run and explain local GGUF models on the machine you have. "
        "With no command, opens the app window.",
    )
    parser.add_argument("--version", action="version", version=f"vrampilot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    gui = sub.add_parser("gui", help="open the app window (the default)")
    gui.add_argument("model", nargs="?", help="GGUF file to select at start")
    gui.set_defaults(handler=_run_gui)
    named = next((a for a in argv or () if not a.startswith("-")), None)
    for name in (_COMMANDS[named],) if named in _COMMANDS else _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # A feature left out of this build (the installers drop vrampilot.hybrid) must not take
            # the CLI down with it; anything else missing is a real error.
            if exc.name and exc.name.startswith(_OPTIONAL_PACKAGES):
                continue
            raise
        module.add_parser(sub)
    return parser


def _run_gui(args: argparse.Namespace) -> int:
    from vrampilot.ui.launch import launch_gui

    return launch_gui(getattr(args, "model", None))


def _moved_by(path: str) -> str:
    """Which setting moves the folder `path` is in to a writable place."""
    from pathlib import Path

    from vrampilot.hub.env import hf_home, hf_hub_cache
    from vrampilot.paths import MOVED_BY_HOME

    if any(Path(path).is_relative_to(root) for root in (hf_home(), hf_hub_cache())):
        return "HF_HOME moves the Hugging Face cache"
    return MOVED_BY_HOME


# C0 controls but tab, line feed and carriage return (progress lines rewrite themselves with \r),
# DEL, C1 controls (U+009B is CSI on many terminals) and the bidirectional overrides that make a
# line read differently from what it is; and lone surrogates, which are how Python holds the bytes
# of a file name that are not UTF-8 (os.fsdecode): no terminal encoding can write them.
_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """`text` with each control character written out as its escape (ESC as \\u001b): visible, inert,
    and in a JSON string (`--json` output) the same character again."""
    return _TERMINAL_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _SafeStream:
    """A text stream that writes `terminal_safe` text to the stream it wraps."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(terminal_safe(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self._stream, name)


def _utf8_when_redirected(stream: Any) -> None:
    """On Windows, output going to a pipe or a file is written in UTF-8. Python writes it in the
    ANSI code page there (cp1252 in the West), which cannot hold a model path in Chinese or Greek:
    `vrampilot export` of such a file ended in UnicodeEncodeError. A console is UTF-8 already."""
    if sys.platform != "win32" or stream is None or not hasattr(stream, "reconfigure"):
        return
    with contextlib.suppress(OSError, ValueError):
        if not stream.isatty():
            stream.reconfigure(encoding="utf-8")


@contextlib.contextmanager
def _safe_terminal() -> Iterator[None]:
    _utf8_when_redirected(sys.stdout)
    _utf8_when_redirected(sys.stderr)
    saved = sys.stdout, sys.stderr
    # A program without a console (vrampilot.exe, pythonw) has no streams at all: print() to None
    # writes nothing, while a wrapper around None raised at the first line printed, and inside a
    # Qt slot that silently cut the slot short (the window never quit under Windows).
    sys.stdout, sys.stderr = (None if s is None else _SafeStream(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class _WarningLine(logging.Handler):
    """The core's warnings (a damaged speed record set aside, a probe that did not run) as the CLI's
    own lines: `vrampilot: ` and the message, without the traceback a warning may carry, written
    to whatever sys.stderr is when it is emitted (the terminal-safe stream)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"vrampilot: {record.getMessage()}", file=sys.stderr)
        except Exception:  # a log line must never take the command down (a closed pipe)
            self.handleError(record)


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Without a handler of its own the `vrampilot` logger's warnings reach stderr through Python's
    last-resort handler: the bare message, and a traceback for some."""
    log = logging.getLogger("vrampilot")
    handler = _WarningLine()
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)


def main(argv: list[str]) -> int:
    with _safe_terminal():
        return _main(argv)


def _main(argv: list[str]) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = getattr(args, "handler", _run_gui)
    if handler is _run_gui:
        return _run(handler, args)  # the window logs to its file (vrampilot.log)
    with _warnings_as_lines():
        return _run(handler, args)


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except UserError as exc:
        print(f"vrampilot: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`vrampilot plan --json | head`): nothing is wrong
        _quiet_stdout()
        return 0
    except OSError as exc:
        if exc.errno not in _CANNOT_WRITE or exc.filename is None:
            raise
        from vrampilot.paths import cannot_write_text

        text = cannot_write_text(exc.filename, exc.strerror or str(exc), _moved_by(str(exc.filename)))
        print(f"vrampilot: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vrampilot: interrupted", file=sys.stderr)
        return 130


def _quiet_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's flush at exit does not hit the
    closed pipe again (Python's documented recipe for SIGPIPE)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
