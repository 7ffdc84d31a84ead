"""The tool loop: ask the model with the tools offered; run the calls it makes, each after the user
approves it; give it the results; ask again, until it answers without a call.

Where it runs: llama-server, not the in-process engine. llama-cpp-python cannot stream tool calls
nor parse them per model family; llama-server renders the tools with the model's own template
(--jinja, on by default), parses the calls of each family it knows (and a generic JSON form for
the rest) and, with tool_choice "required", constrains the output by a grammar to a valid call.
So a tool-using chat runs as MTP and RPC plans do, in a private llama-server (server/private.py);
the model stays the same and so does the plan.

Every call is asked first unless the user always allows the tool (policy.py) or named it for a
script (`--allow-tool`). A result is untrusted text: it goes to the model as a tool message and
nowhere else (never run, never rendered as HTML, never read by the policy); a result larger than
its budget is cut, with a note saying so to the model and in the transcript. A malformed call, an
unknown tool, a tool the config does not allow and a denied call are told to the model as that
call's result, so it can answer anyway; the user sees one line for each. Output llama-server
cannot read as a call at all (a call cut by max_tokens) ends the loop with the text written so
far as the answer, and a line saying why.

After `max_rounds` rounds of calls the model is asked once more with tool_choice "none": it
answers with what it has rather than calling forever. A logit bias in the sampling, and the
reply's start (`first_start`), apply to the first round only (the round `first_choice` sets).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vrampilot.agents.catalog import ToolCatalog
from vrampilot.agents.client import ToolOutcome
from vrampilot.agents.policy import ApprovalPolicy, Decision
from vrampilot.engine import Reply, SamplingParams, UnparsedReply
from vrampilot.message import Message, ToolCall, fit_tool_result
from vrampilot.tool_turn import ToolRound, ToolStep, Verdict

MAX_ROUNDS = 8
RESULT_BUDGET_CHARS = 16_000  # about 4K tokens of English; the CLI sizes it from the context


class ToolModel(Protocol):
    """What the loop needs from the model: one round, tools offered (server/backend.py's backend)."""

    def reply_with_tools(
        self,
        messages: Sequence[Message],
        sampling: SamplingParams,
        *,
        tools: Sequence[dict[str, Any]],
        tool_choice: str,
        parallel_tool_calls: bool,
        start_with: str = "",
        on_text: Callable[[str], None],
        cancel: threading.Event,
    ) -> Reply: ...


class ToolRunner(Protocol):
    """What runs a tool (client.py's McpManager)."""

    def call(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, cancel: threading.Event | None = None
    ) -> ToolOutcome: ...


@dataclass(frozen=True)
class ApprovalRequest:
    """What the user is asked to allow: which server's tool, with which arguments (as the model wrote
    them: the user approves exactly what will be sent)."""

    server: str
    tool: str
    arguments: Mapping[str, Any]
    description: str

    def arguments_text(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


Approver = Callable[[ApprovalRequest], Decision]


@dataclass(frozen=True)
class LoopResult:
    reply: Reply  # the final answer (its text and stats)
    rounds: tuple[ToolRound, ...] = field(default=())
    capped: bool = False  # the rounds cap was reached: the last answer was asked without tools
    # Why the last reply is the model's raw text: llama-server could not read it as a call (its
    # message). The text is kept as the answer rather than lost with the error.
    unparsed: str | None = None


@dataclass
class ToolLoop:
    model: ToolModel
    runner: ToolRunner
    catalog: ToolCatalog
    approve: Approver
    policy: ApprovalPolicy
    allowed_names: tuple[str, ...] = ()  # --allow-tool: run without asking
    max_rounds: int = MAX_ROUNDS
    first_choice: str = "auto"  # tool_choice of the first round ("required": a call, whatever the model judges)
    parallel_calls: bool = True  # False: at most one call a round (llama-server's parallel_tool_calls)
    # The first round's reply starts with this text: the template's call opener (ServerBackend's
    # call_opener) makes a "required" first round a call from its first token.
    first_start: str = ""
    result_budget_chars: int = RESULT_BUDGET_CHARS
    on_step: Callable[[ToolStep], None] = lambda _s: None
    on_round: Callable[[ToolRound], None] = lambda _r: None  # the history stores each round here

    def run(
        self,
        messages: Sequence[Message],
        sampling: SamplingParams,
        *,
        on_text: Callable[[str], None],
        cancel: threading.Event,
    ) -> LoopResult:
        convo = list(messages)
        rounds: list[ToolRound] = []
        tools = self.catalog.api_tools()
        # The sampling's logit bias is the first round's: it is how a small model is made to start a
        # call ('{' biased up, docs/agents.md), and kept in later rounds it would force a call in each.
        later = sampling.with_(logit_bias=())
        for n in range(self.max_rounds + 1):
            capped = n == self.max_rounds
            choice = "none" if capped else (self.first_choice if n == 0 else "auto")
            try:
                reply = self.model.reply_with_tools(
                    convo,
                    sampling if n == 0 else later,
                    tools=tools,
                    tool_choice=choice,
                    parallel_tool_calls=self.parallel_calls,
                    start_with=self.first_start if n == 0 and not capped else "",
                    on_text=on_text,
                    cancel=cancel,
                )
            except UnparsedReply as exc:
                return LoopResult(exc.partial, tuple(rounds), unparsed=str(exc))
            if not reply.tool_calls or capped or cancel.is_set():
                return LoopResult(reply, tuple(rounds), capped and bool(rounds))
            steps: list[ToolStep] = []
            for call in reply.tool_calls:
                if cancel.is_set():
                    break
                step = self._step(call, cancel)
                steps.append(step)
                self.on_step(step)
            rnd = ToolRound(reply.text, tuple(steps))
            rounds.append(rnd)
            self.on_round(rnd)
            convo += rnd.messages()
            if cancel.is_set():
                return LoopResult(reply, tuple(rounds))
        raise AssertionError("unreachable: the last round is asked without tools")

    def _step(self, call: ToolCall, cancel: threading.Event) -> ToolStep:
        def refused(why: str, server: str | None = None) -> ToolStep:
            return ToolStep(call.id, call.name, server, call.arguments, why, True, 0.0, "refused", len(why))

        info = self.catalog.find(call.name)
        if info is None:
            other = self.catalog.refused.get(call.name)
            if other is not None:
                return refused(f"the tool {call.name} is not allowed by the user's settings", other.server)
            names = ", ".join(self.catalog.offered) or "none"
            return refused(f"there is no tool named {call.name!r}; the tools are: {names}")
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return refused(
                f"the arguments are not valid JSON ({exc.msg}); call the tool again with a JSON object", info.server
            )
        if not isinstance(arguments, dict):
            return refused("the arguments must be a JSON object", info.server)
        verdict = self._verdict(call.name, info.server, info.name, arguments, info.description)
        if verdict == "denied":
            why = "the user denied this call"
            return ToolStep(call.id, call.name, info.server, call.arguments, why, True, 0.0, verdict, len(why))
        outcome = self.runner.call(info.server, info.name, arguments, cancel=cancel)
        shown = fit_tool_result(
            outcome.text, self.result_budget_chars, len, tool=f"the tool {call.name}", unit="characters"
        ).text
        return ToolStep(
            call.id,
            call.name,
            info.server,
            call.arguments,
            shown,
            outcome.is_error,
            outcome.duration_s,
            verdict,
            len(outcome.text),
        )

    def _verdict(
        self, model_name: str, server: str, tool: str, arguments: Mapping[str, Any], description: str
    ) -> Verdict:
        if any(self.catalog.matches(model_name, p) for p in self.allowed_names):
            return "flag"
        if self.policy.always_allowed(server, tool):
            return "policy"
        decision = self.approve(ApprovalRequest(server, tool, arguments, description))
        if decision is Decision.ALWAYS:
            self.policy.remember(server, tool)
            return "always"
        return "allowed" if decision is Decision.ALLOW_ONCE else "denied"
