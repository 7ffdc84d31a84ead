"""`vrampilot serve` passes tools through: the official `openai` and `anthropic` clients send tool
definitions, tool choices, earlier calls and their results, streamed and not, to a real `serve` of
the embedded model, and get well-formed answers.

The command runs with hostile LLAMA_ARG_* variables in its environment, as a user's shell may have
them: LLAMA_ARG_JINJA=0 (llama-server then refuses every request with `tools`) and
LLAMA_ARG_TOOLS=all (llama-server's own shell and file tools, runnable by any client through
POST /tools). Neither may reach the server: the plan's argv is the whole configuration, and the
server never runs tools for a remote client.

What llama-server does with a tool list depends on the chat template: SmolLM2's own never mentions
tools (llama-server then never shows them to the model), so the server runs with
`--chat-template-file`, SmolLM2's ChatML with tools written as Qwen2.5's template writes them.
llama-server's `required` lets the model write text before its call (its grammar only forbids
ending without one), so the conversations carry three earlier calls and results: with them the
135M model calls at once, and the grammar makes each call valid for the schema.
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
GREEDY = {"temperature": 0}  # the anthropic client (2.x) takes no temperature argument; llama-server reads it
CITIES = ("London", "Berlin", "Madrid")
# SmolLM2's template with tools, in Qwen2.5's way (llama.cpp's models/templates/Qwen-Qwen2.5-7B-Instruct.jinja).
TEMPLATE = """\
{%- set default = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' %}
{%- if tools %}
    {{- '<|im_start|>system\\n' + (messages[0]['content'] if messages[0]['role'] == 'system' else default) }}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {{- '<|im_start|>system\\n' + (messages[0]['content'] if messages[0]['role'] == 'system' else default) + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def _openai_history() -> list[dict[str, Any]]:
    """Three questions, each answered by a call, its result and a reply; then the question."""
    out: list[dict[str, Any]] = []
    for i, city in enumerate(CITIES):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
        }
        out += [
            {"role": "user", "content": f"What is the weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "sunny"},
            {"role": "assistant", "content": f"It is sunny in {city}."},
        ]
    return [*out, {"role": "user", "content": QUESTION}]


def _anthropic_history() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, city in enumerate(CITIES):
        out += [
            {"role": "user", "content": f"What is the weather in {city}?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": city}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "sunny"}]},
            {"role": "assistant", "content": f"It is sunny in {city}."},
        ]
    return [*out, {"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One `vrampilot serve` for the module, started as a user would, with the hostile variables."""
    env = {
        **os.environ,
        "VRAMPILOT_HOME": str(tmp_path_factory.mktemp("home")),
        "LLAMA_ARG_JINJA": "0",
        "LLAMA_ARG_TOOLS": "all",
    }
    template = tmp_path_factory.mktemp("template") / "smollm2-tools.jinja"
    template.write_text(TEMPLATE, encoding="utf-8")
    args = ["--port", str(free_port()), "--ctx", "2048", "--threads", "1", "--api-key", KEY]
    args += ["--chat-template-file", str(template)]
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
        info["template"] = str(template)
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
    assert "--jinja" in served["argv"] and served["tools_in_template"] is True
    conn = http.client.HTTPConnection("127.0.0.1", int(served["port"]), timeout=60)
    try:
        conn.request("GET", "/tools", headers={"Authorization": f"Bearer {KEY}"})
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()
    assert resp.status == 403  # llama-server's answer when it runs no tools of its own


def _assert_weather_call(name: str | None, arguments: str | None) -> None:
    """A call the grammar allowed: the tool given, with arguments its schema accepts."""
    assert name == "get_weather" and arguments is not None
    args = json.loads(arguments)
    assert isinstance(args, dict) and isinstance(args["city"], str)
    assert set(args) <= {"city", "unit"} and args.get("unit", "celsius") in ("celsius", "fahrenheit")


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_openai_tool_calls(served: dict[str, Any], choice: str) -> None:
    r = _openai(served).chat.completions.create(
        model=str(served["model_id"]),
        messages=_openai_history(),
        tools=OPENAI_TOOLS,
        tool_choice=choice,
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=0,
    )
    calls = r.choices[0].message.tool_calls or []
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1 and calls[0].id
    _assert_weather_call(calls[0].function.name, calls[0].function.arguments)


def test_openai_tool_choice_none_answers_in_text(served: dict[str, Any]) -> None:
    r = _openai(served).chat.completions.create(
        model=str(served["model_id"]),
        messages=[{"role": "user", "content": QUESTION}],
        tools=OPENAI_TOOLS,
        tool_choice="none",
        max_tokens=12,
        temperature=0,
    )
    assert not r.choices[0].message.tool_calls and r.choices[0].message.content


def test_openai_streams_tool_call_deltas(served: dict[str, Any]) -> None:
    stream = _openai(served).chat.completions.create(
        model=str(served["model_id"]),
        messages=_openai_history(),
        tools=OPENAI_TOOLS,
        tool_choice="required",
        max_tokens=60,
        temperature=0,
        stream=True,
    )
    name, arguments, pieces, finish = "", "", 0, None
    for chunk in stream:
        if not chunk.choices:
            continue
        for call in chunk.choices[0].delta.tool_calls or []:
            assert call.index == 0
            if call.function is not None:
                name += call.function.name or ""
                arguments += call.function.arguments or ""
                pieces += 1
        finish = chunk.choices[0].finish_reason or finish
    assert pieces > 1 and finish == "tool_calls"  # the arguments arrive in deltas, as they are generated
    _assert_weather_call(name, arguments)


def test_a_reply_started_at_the_templates_call_opener_is_a_call(served: dict[str, Any]) -> None:
    """The window's "call a tool first": llama-server's `required` lets the model write text before
    its call, so the reply is started at the call's opener as the template writes it (here Qwen's
    `<tool_call>` form, found by ServerBackend.call_opener from llama-server's own rendering), from
    where the grammar allows only a valid call: the bare question, with no earlier calls to copy,
    gets one."""
    import threading

    from vrampilot.engine import SamplingParams
    from vrampilot.message import Message
    from vrampilot.server.backend import ServerBackend

    backend = ServerBackend(f"http://127.0.0.1:{served['port']}", api_key=KEY, timeout_s=120)
    opener = backend.call_opener(OPENAI_TOOLS)
    assert opener == "<tool_call>\n{"
    reply = backend.reply_with_tools(
        [Message("user", QUESTION)],
        SamplingParams(temperature=0.0, max_tokens=60, seed=1),
        tools=OPENAI_TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        start_with=opener,
        on_text=lambda _t: None,
        cancel=threading.Event(),
    )
    # One call: this llama-server lets the model go on with more `<tool_call>`s whatever
    # parallel_tool_calls says (the 135M model does, until max_tokens); the backend keeps the first.
    (call,) = reply.tool_calls
    _assert_weather_call(call.name, call.arguments)


def test_the_tools_cost_in_the_prompt_is_what_the_planner_counts(served: dict[str, Any]) -> None:
    """llama-server's own prompt count grows by exactly count_tools_tokens' figure for this template."""
    from vrampilot.engine import count_tools_tokens

    def prompt_tokens(**tools: Any) -> int:
        r = _openai(served).chat.completions.create(
            model=str(served["model_id"]), messages=[{"role": "user", "content": "Hi"}], max_tokens=1, **tools
        )
        assert r.usage is not None
        return int(r.usage.prompt_tokens)

    added = prompt_tokens(tools=OPENAI_TOOLS) - prompt_tokens()
    template = Path(served["template"]).read_text(encoding="utf-8")
    assert added == count_tools_tokens(str(served["model"]), OPENAI_TOOLS, template=template).tokens > 50


def test_anthropic_tool_use_and_tool_result(served: dict[str, Any]) -> None:
    client = _anthropic(served)
    r = client.messages.create(
        model=str(served["model_id"]),
        max_tokens=60,
        extra_body=GREEDY,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
        messages=_anthropic_history(),
    )
    uses = [b for b in r.content if b.type == "tool_use"]
    assert r.stop_reason == "tool_use" and len(uses) == 1 and uses[0].id
    _assert_weather_call(uses[0].name, json.dumps(uses[0].input))
    # The call's result goes back as a tool_result block, and the model answers it in text.
    history = [
        *_anthropic_history(),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": uses[0].id, "name": uses[0].name, "input": uses[0].input}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]},
    ]
    answer = client.messages.create(
        model=str(served["model_id"]), max_tokens=12, extra_body=GREEDY, tools=ANTHROPIC_TOOLS, messages=history
    )
    assert answer.content and answer.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_anthropic_streams_tool_use(served: dict[str, Any]) -> None:
    with _anthropic(served).messages.stream(
        model=str(served["model_id"]),
        max_tokens=60,
        extra_body=GREEDY,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
        messages=_anthropic_history(),
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    starts = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
    json_deltas = [e for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(starts) == 1 and json_deltas and final.stop_reason == "tool_use"
    use = next(b for b in final.content if b.type == "tool_use")
    _assert_weather_call(use.name, json.dumps(use.input))


def test_a_chat_template_file_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jinja"
    empty.write_text("  \n", encoding="utf-8")
    for path, why in ((tmp_path / "missing.jinja", "cannot read the chat template"), (empty, "is empty")):
        r = subprocess.run(
            [sys.executable, "-m", "vrampilot", "serve", "--chat-template-file", str(path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "VRAMPILOT_HOME": str(tmp_path)},
            timeout=120,
        )
        assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
