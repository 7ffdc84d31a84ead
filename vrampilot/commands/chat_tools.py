"""`vrampilot chat` with MCP tools: the MCP servers started beside a private llama-server, each
call asked on the terminal (or allowed by --allow-tool), each step in one line on stderr.

Without a terminal (a script, a pipe) nobody can be asked: a call not named by --allow-tool is
denied, the model is told so, and the user sees the line saying which flag would allow it.
"""

from __future__ import annotations

import sys
from typing import TextIO

from vrampilot.agents import ApprovalRequest, Approver, Decision, McpManager, ServerStatus, State
from vrampilot.tool_turn import ToolStep, one_line

START_WAIT_S = 60.0  # the servers' own start timeout is 30 s; a slow disk may take longer to import


def terminal_approver(stdin: TextIO = sys.stdin, stderr: TextIO = sys.stderr) -> Approver:
    """An Approver that asks on the terminal, or one that denies when there is none."""
    if not stdin.isatty():

        def deny(req: ApprovalRequest) -> Decision:
            print(
                f"vrampilot: {req.server}/{req.tool} denied: no terminal to ask on "
                f"(pass --allow-tool {req.tool} to allow it)",
                file=stderr,
            )
            return Decision.DENY

        return deny

    def ask(req: ApprovalRequest) -> Decision:
        stderr.write(
            f"\nvrampilot: the model calls {req.server}/{req.tool} with {one_line(req.arguments_text(), 400)}\n"
            "Allow? [y] once, [a] always for this tool, [N] deny: "
        )
        stderr.flush()
        answer = stdin.readline().strip().lower()
        if answer in ("a", "always"):
            return Decision.ALWAYS
        return Decision.ALLOW_ONCE if answer in ("y", "yes") else Decision.DENY

    return ask


def report_servers(manager: McpManager, stderr: TextIO = sys.stderr) -> list[ServerStatus]:
    """Wait for the servers' first start and say, in one line each, which did not come up."""
    statuses = manager.wait_settled(START_WAIT_S)
    for s in statuses:
        if s.state is State.READY:
            n = sum(1 for t in s.tools if t.allowed)
            print(f"vrampilot: MCP server {s.name}: {n} tool{'s' if n != 1 else ''}", file=stderr)
        elif s.state is not State.DISABLED:
            print(f"vrampilot: MCP server {s.name} is not available: {s.last_error or s.state.value}", file=stderr)
    return statuses


def print_step(step: ToolStep, stderr: TextIO = sys.stderr) -> None:
    print(f"\nvrampilot: tool {step.line()}", file=stderr)
