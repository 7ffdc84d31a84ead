"""Quote an argv for bash, PowerShell or cmd, so paths with spaces and non-ASCII survive a paste."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

SHELLS = ("bash", "powershell", "cmd")

_PS_SAFE = re.compile(r"^[A-Za-z0-9_./:\\=+-]+$")
_CMD_SAFE = re.compile(r"^[A-Za-z0-9_./:\\=+-]+$")


def quote_bash(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _ps_quote(arg: str) -> str:
    if _PS_SAFE.match(arg):
        return arg
    # Single quotes are literal in PowerShell; a single quote inside is doubled. Typographic
    # quotes count as quotes there too, so they are doubled as well.
    return "'" + re.sub(r"(['\u2018\u2019\u201a\u201b])", r"\1\1", arg) + "'"


def quote_powershell(argv: Sequence[str]) -> str:
    if not argv:
        return ""
    first = _ps_quote(argv[0])
    # A quoted program path is a string to PowerShell; the call operator runs it.
    prefix = "& " if first.startswith("'") else ""
    return prefix + " ".join([first, *(_ps_quote(a) for a in argv[1:])])


def _cmd_quote(arg: str) -> str:
    if arg and _CMD_SAFE.match(arg):
        return arg
    # cmd passes the line to the program, whose C runtime splits it: inside double quotes a quote
    # is written as \" and backslashes before a quote are doubled. cmd expands %VAR% even inside
    # quotes; closing the quote and writing %^ makes the variable name unmatchable, and cmd then
    # drops the caret.
    out = []
    backslashes = 0
    for ch in arg:
        if ch == "\\":
            backslashes += 1
            continue
        if ch == '"':
            out.append("\\" * (backslashes * 2 + 1) + '"')
        else:
            out.append("\\" * backslashes + ch)
        backslashes = 0
    out.append("\\" * (backslashes * 2))
    quoted = '"' + "".join(out) + '"'
    return quoted.replace("%", '"%^"')


def quote_cmd(argv: Sequence[str]) -> str:
    line = " ".join(_cmd_quote(a) for a in argv)
    if any(ord(c) > 127 for c in line):
        # cmd reads the line in the console code page; UTF-8 keeps non-ASCII paths intact.
        return "chcp 65001 >NUL & " + line
    return line


def quote(argv: Sequence[str], shell: str, env: Mapping[str, str] | None = None) -> str:
    """`argv` as one line for `shell`, with `env` set for that command (bash) or the session."""
    env = env or {}
    if shell == "bash":
        return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items()) + quote_bash(argv)
    if shell == "powershell":
        # An assignment needs a string literal: always single-quoted (a quote inside doubled).
        prefix = "".join(f"$env:{k} = '{v.replace(chr(39), chr(39) * 2)}'; " for k, v in env.items())
        return prefix + quote_powershell(argv)
    if shell == "cmd":
        return "".join(f'set "{k}={v}" && ' for k, v in env.items()) + quote_cmd(argv)
    raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")
