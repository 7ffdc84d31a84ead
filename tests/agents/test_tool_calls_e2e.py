"""The whole tool loop with real parts: the embedded model in the bundled llama-server makes a real
call, a real MCP server (a child over stdio, tests/agents/mcp_servers.py) runs it after the
approval, the result goes back to the model, which answers in text; the rounds are kept in the
chat history. Then the same through `vrampilot chat`, with --allow-tool and on a terminal.

How a 135M model is made to call (docs/agents.md): its own chat template does not describe tools,
so the model here is a copy with a template that does (tool_template.jinja: ChatML listing the
tools, calls as bare JSON objects, which llama.cpp's parser reads as its generic JSON form); and
tool_choice "required" still lets it write text before the call, so the first round biases `{`
up (`logit_bias`), after which llama-server's grammar forces a whole call. The one tool takes no
argument, so the call cannot be wrong. The answer is asked with tool_choice "none" (one round of
calls, then the cap): asked with "auto", this model copies the tools' JSON from its prompt, and
llama-server ends the reply with an error event, which is a test of its own here.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from testkit.gguf_models import write_with_chat_template
from testkit.machines import cpu_machine
from tests import waits
from vrampilot.agents import (
    ApprovalPolicy,
    ApprovalRequest,
    Decision,
    McpManager,
    State,
    ToolCatalog,
    ToolLoop,
    parse_config,
)
from vrampilot.engine import Reply, SamplingParams
from vrampilot.gguf import load_model_spec
from vrampilot.message import Message
from vrampilot.planner.plan import Pins, Plan
from vrampilot.planner.search.choose import plan as make_plan
from vrampilot.planner.target import TargetRequest, resolve_target
from vrampilot.server.backend import ServerBackend
from vrampilot.server.private import private_server
from vrampilot.storage import ChatStore, ConversationService
from vrampilot.tool_turn import ToolRound

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SERVERS = str(Path(__file__).with_name("mcp_servers.py"))
TEMPLATE = Path(__file__).with_name("tool_template.jinja")
START_S = 120.0  # a child Python importing the SDK, on a loaded machine (test_mcp_servers.py)
QUESTION = "What time is it in Paris?"
ANSWER = "It is 10:42 in Paris."
FORCED = SamplingParams(temperature=0.0, max_tokens=60, seed=1, logit_bias=(("{", 100.0),))
# The call's line on stderr: the arguments as the model wrote them ("{ }": its JSON's whitespace).
CALL_LINE = re.compile(r"^vrampilot: tool clock/clock\(\{ *\}\): 21 characters in [0-9.]+ s$", re.M)
CLI_SAMPLING = ["--temperature", "0", "--seed", "1", "--max-tokens", "60", "--logit-bias", "{=100"]


@pytest.fixture(scope="module")
def tool_model(embedded_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tool-model") / "SmolLM2-135M-tools.gguf"
    return write_with_chat_template(embedded_model, path, TEMPLATE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def mcp_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"clock": {"command": sys.executable, "args": [SERVERS, "clock"]}}}))
    return path


@pytest.fixture(scope="module")
def backend(tool_model: Path) -> Iterator[ServerBackend]:
    """One llama-server for the module, started as `vrampilot chat` starts its own (free port, key)."""
    p: Plan = make_plan(
        load_model_spec(tool_model),
        resolve_target(TargetRequest(cpu_only=True), cpu_machine()),
        Pins(n_ctx=2048, n_threads=1, n_threads_batch=1),
    )
    with private_server(p) as b:
        yield b


@pytest.fixture(scope="module")
def manager(mcp_json: Path) -> Iterator[McpManager]:
    with McpManager(parse_config(mcp_json.read_text()), start_timeout_s=START_S) as m:
        waits.until_true(lambda: m.statuses()[0].state is State.READY, cpu_s=120)
        yield m


class Recorded:
    """The real backend, and what the loop sent it each round (the messages, the sampling, the
    tool_choice): how the tests see that a result or a denial reached the model."""

    def __init__(self, backend: ServerBackend) -> None:
        self.backend = backend
        self.sent: list[tuple[list[Message], SamplingParams, str]] = []

    def reply_with_tools(self, messages: Sequence[Message], sampling: SamplingParams, **kw: Any) -> Reply:
        self.sent.append((list(messages), sampling, kw["tool_choice"]))
        return self.backend.reply_with_tools(messages, sampling, **kw)


def _loop(
    backend: Recorded,
    manager: McpManager,
    answer: Decision,
    asked: list[ApprovalRequest],
    tmp: Path,
    first_choice: str = "required",
) -> ToolLoop:
    def approve(req: ApprovalRequest) -> Decision:
        asked.append(req)
        return answer

    return ToolLoop(
        backend,
        manager,
        ToolCatalog.build(manager.tools()),
        approve,
        ApprovalPolicy(tmp / "tool-approvals.json"),
        max_rounds=1,
        first_choice=first_choice,
        parallel_calls=False,
    )


def test_a_real_call_approved_answered_and_kept(backend: ServerBackend, manager: McpManager, tmp_path: Path) -> None:
    db = tmp_path / "chats.sqlite3"
    service = ConversationService(ChatStore(db))
    chat_id = service.create(model_path="SmolLM2-135M-tools.gguf").id
    service.ask(chat_id, QUESTION)
    asked: list[ApprovalRequest] = []
    model = Recorded(backend)
    loop = _loop(model, manager, Decision.ALLOW_ONCE, asked, tmp_path)

    def keep(rnd: ToolRound) -> None:
        service.add_tool_round(chat_id, rnd)

    loop.on_round = keep
    streamed: list[str] = []
    result = loop.run(service.for_model(chat_id), FORCED, on_text=streamed.append, cancel=threading.Event())

    # The call: asked first, exactly as it is sent; run by the MCP server; its result given back.
    assert [(r.server, r.tool, dict(r.arguments)) for r in asked] == [("clock", "clock", {})]
    (rnd,) = result.rounds
    (step,) = rnd.steps
    assert (step.server, step.tool, step.verdict, step.is_error, step.result) == (
        "clock",
        "clock",
        "allowed",
        False,
        ANSWER,
    )
    assert json.loads(step.arguments) == {}
    # The result went back to the model as the call's tool message; the answer was asked without
    # the bias, and it is text (what it says is the 135M model's judgement, not checked).
    (first, sampling1, choice1), (second, sampling2, choice2) = model.sent
    assert (choice1, sampling1.logit_bias, choice2, sampling2.logit_bias) == ("required", FORCED.logit_bias, "none", ())
    assert second[len(first) :] == rnd.messages()
    assert second[-1] == Message("tool", ANSWER, tool_call_id=step.call_id)
    assert result.reply.text.strip() and not result.reply.tool_calls and result.unparsed is None
    assert "".join(streamed) == rnd.text + result.reply.text
    service.add_reply(chat_id, result.reply.text, result.reply.stats.to_dict())
    service.store.close()

    # Reopened: the question, the round with its call and result, the answer; as the model gets it.
    again = ConversationService(ChatStore(db))
    kept = again.messages(chat_id)
    assert [(m.role, m.tool_round is not None) for m in kept] == [
        ("user", False),
        ("assistant", True),
        ("assistant", False),
    ]
    assert kept[1].tool_round is not None and kept[1].tool_round.to_dict() == rnd.to_dict()  # (ms kept)
    convo = again.for_model(chat_id)
    assert [m.role for m in convo] == ["user", "assistant", "tool", "assistant"]
    assert convo[1].tool_calls[0].name == "clock" and convo[2].content == ANSWER
    assert convo[2].tool_call_id == convo[1].tool_calls[0].id
    # The server takes the kept history back (its template renders the call and the result).
    assert backend.count_prompt([*convo, Message("user", "Thanks!")]) > backend.count_prompt([convo[0]])
    again.store.close()


def test_a_denied_call_is_told_to_the_model(backend: ServerBackend, manager: McpManager, tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []
    model = Recorded(backend)
    loop = _loop(model, manager, Decision.DENY, asked, tmp_path)
    result = loop.run([Message("user", QUESTION)], FORCED, on_text=lambda _t: None, cancel=threading.Event())
    assert [(r.server, r.tool) for r in asked] == [("clock", "clock")]
    step = result.rounds[0].steps[0]
    assert (step.verdict, step.is_error, step.result) == ("denied", True, "the user denied this call")
    # The model was given the denial as the call's result, and answered in text.
    assert model.sent[-1][0][-1] == Message("tool", "the user denied this call", tool_call_id=step.call_id)
    assert result.reply.text.strip() and not result.reply.tool_calls
    assert not ApprovalPolicy(tmp_path / "tool-approvals.json").entries()


def test_a_reply_that_is_no_call_is_kept_with_the_reason(
    backend: ServerBackend, manager: McpManager, tmp_path: Path
) -> None:
    """The real run's failure: in "auto", output that starts a call and is not one (here cut by
    max_tokens) makes llama-server end the stream with an error event and no [DONE]. It read as a
    crash ("closed the connection"), and the loop lost the round; now its message is the reason,
    and the text so far is the answer."""
    asked: list[ApprovalRequest] = []
    loop = _loop(Recorded(backend), manager, Decision.ALLOW_ONCE, asked, tmp_path, first_choice="auto")
    streamed: list[str] = []
    cut = FORCED.with_(max_tokens=6)
    result = loop.run([Message("user", QUESTION)], cut, on_text=streamed.append, cancel=threading.Event())
    assert result.unparsed == (
        "llama-server could not read the model's reply as a tool call: "
        "The model produced output that does not match the expected peg-native format"
    )
    assert not asked and not result.rounds and not result.reply.tool_calls
    assert result.reply.text == "".join(streamed)


def _chat_argv(tool_model: Path, mcp_json: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vrampilot",
        "chat",
        str(tool_model),
        "--ctx",
        "2048",
        "--threads",
        "1",
        "--prompt",
        QUESTION,
        "--mcp",
        str(mcp_json),
        "--tool-choice",
        "required",
        "--one-call",
        "--tool-rounds",
        "1",
        *CLI_SAMPLING,
        *extra,
    ]


def test_cli_allows_a_tool_by_flag_without_a_terminal(tool_model: Path, mcp_json: Path, tmp_path: Path) -> None:
    env = {**os.environ, "VRAMPILOT_HOME": str(tmp_path)}
    r = waits.run(
        _chat_argv(tool_model, mcp_json, "--allow-tool", "clock"),
        cpu_s=240,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert "vrampilot: MCP server clock: 1 tool" in r.stderr
    assert CALL_LINE.search(r.stderr), r.stderr
    assert "Allow?" not in r.stderr and "denied" not in r.stderr
    assert r.stdout.strip()  # the answer (its words are the model's judgement)


def test_cli_asks_on_a_terminal(tool_model: Path, mcp_json: Path, tmp_path: Path) -> None:
    """The approval typed on a real pseudo-terminal: "a" runs the call and remembers the tool."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        _chat_argv(tool_model, mcp_json),
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "VRAMPILOT_HOME": str(tmp_path)},
        cwd=ROOT,
    )
    os.close(slave)
    err = bytearray()
    assert proc.stderr is not None

    def read_err() -> None:
        assert proc.stderr is not None
        while chunk := os.read(proc.stderr.fileno(), 4096):
            err.extend(chunk)

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    try:
        waits.until_true(lambda: b"Allow? [y] once" in err or proc.poll() is not None, cpu_s=240)
        assert proc.poll() is None, err.decode()
        assert b"the model calls clock/clock with {}" in err
        os.write(master, b"a\n")
        waits.until_true(lambda: proc.poll() is not None, cpu_s=240)
        reader.join()  # the pipe's end: the process has exited
        assert proc.stdout is not None
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = err.decode()
    assert proc.returncode == 0, text
    assert CALL_LINE.search(text), text
    assert out.decode().strip()
    policy = ApprovalPolicy(tmp_path / "data" / "tool-approvals.json")
    assert policy.entries() == [("clock", "clock")]
