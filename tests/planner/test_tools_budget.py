"""The enabled tools' schemas in the plan's context budget: counted by the model's own template and
tokenizer, shown in the reasons, the report's context row and JSON, and warned about past a quarter
of the context (planner/context_budget.py, engine/tool_tokens.py, --tools-tokens)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from testkit.machines import cpu_machine
from vrampilot.commands.plan_report import format_plan, plan_to_dict
from vrampilot.engine import count_tools_tokens, openai_tool
from vrampilot.gguf import load_model_spec
from vrampilot.planner.plan import Pins
from vrampilot.planner.search.choose import plan
from vrampilot.planner.target import TargetRequest, resolve_target

ROOT = Path(__file__).resolve().parents[2]
WEATHER = openai_tool(
    "get_weather",
    "The current weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
# Qwen2.5's way of showing tools (a `# Tools` block in the system turn), as llama.cpp ships it.
TOOLS_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}"
    "{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_tools_are_counted_by_the_models_template_and_tokenizer(embedded_model: Path) -> None:
    own = count_tools_tokens(embedded_model, [WEATHER])
    # SmolLM2's template never mentions tools: the model is not shown them, so they cost nothing.
    assert own.tokens == 0 and not own.described and own.schema_tokens > 20
    shown = count_tools_tokens(embedded_model, [WEATHER], template=TOOLS_TEMPLATE)
    assert shown.described and shown.tokens > own.schema_tokens  # the schema and the template's frame
    two = count_tools_tokens(embedded_model, [WEATHER, openai_tool("noop", "Does nothing", {"type": "object"})])
    assert two.tokens == 0 and count_tools_tokens(embedded_model, []).tokens == 0


def test_the_plan_shows_the_tools_in_its_context_budget_and_warns_past_a_quarter(embedded_model: Path) -> None:
    spec = load_model_spec(embedded_model)
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    light = plan(spec, target, Pins(n_ctx=8192, tools_tokens=1024))
    assert light.context_budget.conversation_tokens == 8192 - 1024
    assert any("tools' schemas take 1,024 tokens" in r for r in light.reasons)
    assert not any("tools" in w for w in light.warnings)
    assert "8192 (tools 1,024 = 12%, 7,168 left for the chat)" in format_plan(light)
    heavy = plan(spec, target, Pins(n_ctx=8192, tools_tokens=3000))
    assert any("37% of the context" in w and "--min-ctx 12032" in w for w in heavy.warnings)
    d = plan_to_dict(heavy)["context_budget"]
    assert d == {
        "n_ctx": 8192,
        "tools_tokens": 3000,
        "conversation_tokens": 5192,
        "tools_share": 0.3662,
        "over_share": True,
    }
    full = plan(spec, target, Pins(n_ctx=1024, tools_tokens=2000))
    assert any("do not fit the 1K context" in w for w in full.warnings)
    assert plan(spec, target, Pins(n_ctx=1024)).context_budget.text() == ""  # no tools: as before


def test_the_cli_takes_tools_tokens(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vrampilot",
            "plan",
            "--cpu-only",
            "--estimate",
            "--ctx",
            "4096",
            "--tools-tokens",
            "2048",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "VRAMPILOT_HOME": str(tmp_path)},
        timeout=300,
    )
    d = json.loads(out.stdout)
    assert d["context_budget"]["tools_tokens"] == 2048 and d["context_budget"]["over_share"] is True
    assert "tools_tokens" in d["pinned"]
    bad = subprocess.run(
        [sys.executable, "-m", "vrampilot", "plan", "--tools-tokens", "-1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert bad.returncode == 2 and "must be at least 0" in bad.stderr


def test_the_plan_panel_lists_the_tools_in_what_fills_the_context(
    qtbot: Any, embedded_model: Path, tmp_path: Path
) -> None:
    from vrampilot.ui.plan.view import PlanView

    spec = load_model_spec(embedded_model)
    target = resolve_target(TargetRequest(cpu_only=True), cpu_machine())
    view = PlanView()
    qtbot.addWidget(view)
    view.set_plan(plan(spec, target, Pins(n_ctx=8192, tools_tokens=3000), alternatives=False))
    assert "8K context (tools 3,000 = 37%, 5,192 left for the chat)" in view.verdict.text()
    assert "more than 25%" in view.reasons.text()
    view.resize(900, 1000)
    view.show()
    qtbot.waitExposed(view)
    assert view.grab().save(str(tmp_path / "plan_tools.png"))
