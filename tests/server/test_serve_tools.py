"""`vrampilot serve` passes tools through: the official `openai` and `anthropic` clients send tool
definitions, tool choices, earlier calls and their results, streamed and not, to a real `serve` of
the embedded model, and get well-formed answers.

The command runs with hostile LLAMA_ARG_* variables in its environment, as a user's shell may have
them: LLAMA_ARG_JINJA=0 (llama-server then refuses every request with `tools`) and
LLAMA_ARG_TOOLS=all (llama-server's own shell and file tools, runnable by any client through
POST /tools). Neither may reach the server: the plan's argv is the whole configuration, and the
server never runs tools for a remote client.

What llama-server does with a tool list depends on the model's chat template: SmolLM2's does not
describe tools, so it answers in text (its template never shows it the tools); these tests check
that every request is taken and answered in the API's shape, not a 135M model's judgement.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.processes import assert_ctrl_c_stops
from vrampilot.server import free_port

pytestmark = pytest.mark.slow
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
ROOT = Path(__file__).resolve().parents[2]
KEY = "tools-test-key-5678"
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
    },
}
OPENAI_TOOLS = [{"type": "function", "function": WEATHER}]
ANTHROPIC_TOOLS = [
    {"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}
]
QUESTION = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One `vrampilot serve` for the module, started as a user would, with the hostile variables."""
    env = {
        **os.environ,
        "VRAMPILOT_HOME": str(tmp_path_factory.mktemp("home")),
        "LLAMA_ARG_JINJA": "0",
        "LLAMA_ARG_TOOLS": "all",
    }
    args = ["--port", str(free_port()), "--ctx", "2048", "--threads", "1", "--api-key", KEY]
    proc = subprocess.Popen(
        [sys.executable, "-m", "vrampilot", "serve", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        info: dict[str, Any] = json.loads(line)
        yield info
        assert_ctrl_c_stops(proc, int(info["pid"]), 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _openai(info: dict[str, Any]) -> Any:
    return openai.OpenAI(base_url=str(info["openai_base_url"]), api_key=KEY, max_retries=0, timeout=120)


def _anthropic(info: dict[str, Any]) -> Any:
    return anthropic.Anthropic(base_url=str(info["base_url"]), api_key=KEY, max_retries=0, timeout=120)


def test_the_servers_own_tools_stay_off_and_the_template_path_is_on(served: dict[str, Any]) -> None:
    assert "--jinja" in served["argv"]
    conn = http.client.HTTPConnection("127.0.0.1", int(served["port"]), timeout=60)
    try:
        conn.request("GET", "/tools", headers={"Authorization": f"Bearer {KEY}"})
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()
    assert resp.status == 403  # llama-server's answer when it runs no tools of its own


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_openai_tools_and_tool_choice_are_taken(served: dict[str, Any], choice: str) -> None:
    r = _openai(served).chat.completions.create(
        model=str(served["model_id"]),
        messages=[{"role": "user", "content": QUESTION}],
        tools=OPENAI_TOOLS,
        tool_choice=choice,
        parallel_tool_calls=False,
        max_tokens=12,
        temperature=0,
    )
    message = r.choices[0].message
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert message.content or message.tool_calls
    for call in message.tool_calls or []:  # a call, when made, names a tool given, with JSON arguments
        assert call.function.name == WEATHER["name"] and isinstance(json.loads(call.function.arguments), dict)


def test_the_tools_cost_in_the_prompt_is_what_the_planner_counts(served: dict[str, Any]) -> None:
    """llama-server's own prompt count grows by count_tools_tokens' figure (0: SmolLM2's template
    never shows the model its tools)."""
    from vrampilot.engine.tool_tokens import count_tools_tokens

    def prompt_tokens(**tools: Any) -> int:
        r = _openai(served).chat.completions.create(
            model=str(served["model_id"]), messages=[{"role": "user", "content": "Hi"}], max_tokens=1, **tools
        )
        assert r.usage is not None
        return int(r.usage.prompt_tokens)

    added = prompt_tokens(tools=OPENAI_TOOLS) - prompt_tokens()
    assert added == count_tools_tokens(str(served["model"]), OPENAI_TOOLS).tokens == 0


def test_openai_streams_a_conversation_with_a_tool_call_and_its_result(served: dict[str, Any]) -> None:
    """An earlier call and its result (role "tool") are rendered and answered, streamed in deltas."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 18, "sky": "clear"}'},
    ]
    stream = _openai(served).chat.completions.create(
        model=str(served["model_id"]),
        messages=messages,
        tools=OPENAI_TOOLS,
        tool_choice="auto",
        max_tokens=12,
        temperature=0,
        stream=True,
    )
    deltas, finish = [], None
    for chunk in stream:
        if chunk.choices:
            d = chunk.choices[0].delta
            deltas.append(
                (d.content or "") + "".join((c.function.arguments or "") for c in d.tool_calls or [] if c.function)
            )
            finish = chunk.choices[0].finish_reason or finish
    assert len([d for d in deltas if d]) > 1 and finish in ("stop", "length", "tool_calls")


def test_anthropic_messages_with_tools_tool_use_and_tool_result(served: dict[str, Any]) -> None:
    client = _anthropic(served)
    r = client.messages.create(
        model=str(served["model_id"]),
        max_tokens=12,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert r.type == "message" and r.role == "assistant" and r.content
    assert r.stop_reason in ("end_turn", "max_tokens", "tool_use")
    history: list[dict[str, Any]] = [
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 degrees, clear sky"}],
        },
    ]
    kinds: list[str] = []
    with client.messages.stream(
        model=str(served["model_id"]), max_tokens=12, tools=ANTHROPIC_TOOLS, messages=history
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and "content_block_delta" in kinds and kinds[-1] == "message_stop"
    assert final.content and final.stop_reason in ("end_turn", "max_tokens", "tool_use")
