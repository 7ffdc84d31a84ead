"""Quote an argv for bash, PowerShell or cmd, so that any file name survives a paste intact and none
can run a command.

bash can write every character (control characters in $'...' form, so the line stays one printable
line). PowerShell's single-quoted strings and cmd's double-quoted ones are literal except for their
own quote characters, so those are doubled (PowerShell) or refused (cmd, where no escape inside
quotes exists and `%VAR%` expands even there); a name these shells cannot hold safely on one line
(a newline, a control character; for cmd also `"` and `%`, which Windows file names never contain)
is refused with a UnquotableError instead of printing a line that would do something else.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from vrampilot.errors import UserError

SHELLS = ("bash", "powershell", "cmd")

_PS_SAFE = re.compile(r"^[A-Za-z0-9_./:\\=+-]+$")
_CMD_SAFE = re.compile(r"^[A-Za-z0-9_./:\\=+-]+$")
# C0 controls, DEL and C1 controls: a terminal acts on them (ESC starts a sequence, U+009B is CSI).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A POSIX file name's bytes that are not UTF-8, as Python holds them (os.fsdecode's surrogateescape:
# byte 0xE9 is U+DCE9). bash writes the byte itself ($'\xe9'); a Windows name never holds one.
_RAW_BYTE = re.compile("[\udc80-\udcff]")
_NEEDS_ANSI_C = re.compile("[\x00-\x1f\x7f-\x9f\udc80-\udcff]")
# PowerShell closes a single-quoted string on any of these, and reads a doubled one as one quote.
_PS_QUOTES = re.compile(r"(['\u2018\u2019\u201a\u201b])")
_CMD_REFUSED = re.compile(r'["%]')
_SHELL_NAMES = {"powershell": "PowerShell", "cmd": "cmd"}


class UnquotableError(UserError):
    """A value that `shell` cannot hold safely on one command line."""

    def __init__(self, shell: str, value: str, what: str) -> None:
        super().__init__(
            f"cannot write {value!r} on a {_SHELL_NAMES.get(shell, shell)} command line: it contains {what}; "
            "rename the file (or export for bash, which can quote any name)"
        )
        self.shell, self.value = shell, value


def _refuse_controls(value: str, shell: str) -> None:
    m = _CONTROL.search(value)
    if m:
        what = "a line break" if m.group() in "\r\n" else f"the control character {m.group()!r}"
        raise UnquotableError(shell, value, what)
    if _RAW_BYTE.search(value):
        raise UnquotableError(shell, value, "bytes that are not UTF-8 text")


def _bash_quote(arg: str) -> str:
    if not _NEEDS_ANSI_C.search(arg):
        return shlex.quote(arg)
    # ANSI-C quoting: exact, and the line shows no raw control character to the terminal.
    out = []
    for ch in arg:
        if ch in "\\'":
            out.append("\\" + ch)
        elif _RAW_BYTE.match(ch):
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif _CONTROL.match(ch):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x80 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def quote_bash(argv: Sequence[str]) -> str:
    return " ".join(_bash_quote(a) for a in argv)


def _ps_string(value: str) -> str:
    """A PowerShell single-quoted (literal) string: nothing inside expands."""
    _refuse_controls(value, "powershell")
    return "'" + _PS_QUOTES.sub(r"\1\1", value) + "'"


def _ps_quote(arg: str) -> str:
    return arg if _PS_SAFE.match(arg) else _ps_string(arg)


def quote_powershell(argv: Sequence[str]) -> str:
    if not argv:
        return ""
    first = _ps_quote(argv[0])
    # A quoted program path is a string to PowerShell; the call operator runs it.
    prefix = "& " if first.startswith("'") else ""
    return prefix + " ".join([first, *(_ps_quote(a) for a in argv[1:])])


def _cmd_checked(value: str) -> str:
    _refuse_controls(value, "cmd")
    m = _CMD_REFUSED.search(value)
    if m:
        # Inside "..." cmd has no escape: a " would end the quoting and leave `& calc` a command,
        # and %NAME% expands even there.
        raise UnquotableError("cmd", value, f"a {m.group()} character")
    return value


def _cmd_quote(arg: str) -> str:
    if arg and _CMD_SAFE.match(arg):
        return arg
    # Inside double quotes cmd takes & | < > ^ ( ) literally; the program's C runtime then splits
    # the line, where backslashes are literal unless they precede the closing quote (doubled there).
    body = _cmd_checked(arg)
    trailing = len(body) - len(body.rstrip("\\"))
    return '"' + body + "\\" * trailing + '"'


def quote_cmd(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    sets = "".join(f'set "{k}={_cmd_checked(v)}" && ' for k, v in (env or {}).items())
    line = sets + " ".join(_cmd_quote(a) for a in argv)
    if any(ord(c) > 127 for c in line):
        # cmd reads the line in the console code page; UTF-8 keeps non-ASCII paths intact.
        return "chcp 65001 >NUL & " + line
    return line


def quote(argv: Sequence[str], shell: str, env: Mapping[str, str] | None = None) -> str:
    """`argv` as one line for `shell`, with `env` set for that command (bash) or the session.

    Raises UnquotableError when a value cannot be written safely for `shell`."""
    env = env or {}
    if shell == "bash":
        return "".join(f"{k}={_bash_quote(v)} " for k, v in env.items()) + quote_bash(argv)
    if shell == "powershell":
        # An assignment needs a string literal: always single-quoted.
        prefix = "".join(f"$env:{k} = {_ps_string(v)}; " for k, v in env.items())
        return prefix + quote_powershell(argv)
    if shell == "cmd":
        return quote_cmd(argv, env)
    raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")
