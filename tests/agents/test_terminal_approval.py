"""`vrampilot chat`'s approval on a terminal: a real pseudo-terminal answers the prompt; without a
terminal (a pipe) every call not named by --allow-tool is denied with a line saying which flag
would allow it."""

from __future__ import annotations

import io
import os
import pty

from vrampilot.agents import ApprovalRequest, Decision
from vrampilot.commands.chat_tools import terminal_approver

REQ = ApprovalRequest("calc", "add", {"a": 2, "b": "\x1b[31mred"}, "Add two integers.")


def test_a_terminal_is_asked_and_its_answer_taken() -> None:
    for typed, decision in ((b"a\n", Decision.ALWAYS), (b"y\n", Decision.ALLOW_ONCE), (b"\n", Decision.DENY)):
        master, slave = pty.openpty()
        try:
            with os.fdopen(os.dup(slave), "r") as tty_in:
                os.write(master, typed)
                err = io.StringIO()
                assert terminal_approver(tty_in, err)(REQ) is decision
                shown = err.getvalue()
                assert "calc/add" in shown and "Allow? [y] once, [a] always" in shown
                assert "\x1b" not in shown  # an argument cannot drive the terminal
        finally:
            os.close(master)
            os.close(slave)


def test_without_a_terminal_a_call_is_denied_and_the_flag_named() -> None:
    r, w = os.pipe()
    os.close(w)
    with os.fdopen(r, "r") as piped:
        err = io.StringIO()
        assert terminal_approver(piped, err)(REQ) is Decision.DENY
    assert (
        err.getvalue().strip()
        == "vrampilot: calc/add denied: no terminal to ask on (pass --allow-tool add to allow it)"
    )
