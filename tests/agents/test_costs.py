"""What each MCP tool and server costs in every prompt (agents/costs.py), as the MCP servers tab
shows it: counted with the embedded model's tokenizer and a template that shows tools
(tool_template.jinja), each cost being what unticking gives back; a template that shows no tools
costs nothing; without a model, an estimate that says so."""

from __future__ import annotations

import json
import math
from pathlib import Path

from vrampilot.agents import ToolCatalog, ToolInfo
from vrampilot.agents.costs import estimate_tools_tokens, tool_costs
from vrampilot.engine import ToolsCounter, count_tools_tokens

TEMPLATE = (Path(__file__).with_name("tool_template.jinja")).read_text(encoding="utf-8")
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    ToolInfo("web", "get_weather", "The current weather in a city", CITY),
    ToolInfo("web", "search", "Search the web", {"type": "object", "properties": {"q": {"type": "string"}}}),
    # Two servers list a `search`: the model sees web__search and files__search.
    ToolInfo("files", "search", "Search the files", {"type": "object", "properties": {"q": {"type": "string"}}}),
    ToolInfo("files", "read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}, False),
]


def _with(tools: list[ToolInfo], **allowed: bool) -> list[ToolInfo]:
    """`tools` with the allowance of the tools named `server__tool` changed."""
    out = []
    for t in tools:
        key = f"{t.server}__{t.name}"
        out.append(ToolInfo(t.server, t.name, t.description, t.input_schema, allowed.get(key, t.allowed)))
    return out


def test_each_cost_is_what_unticking_gives_back(embedded_model: Path) -> None:
    counter = ToolsCounter(embedded_model, template=TEMPLATE)

    def total(tools: list[ToolInfo]) -> int:
        return count_tools_tokens(embedded_model, ToolCatalog.build(tools).api_tools(), template=TEMPLATE).tokens

    costs = tool_costs(TOOLS, counter.count)
    assert costs.described and not costs.estimate
    assert costs.total_tokens == total(TOOLS) > 50  # what the plan counts for the allowed tools
    weather = costs.tool_tokens[("web", "get_weather")]
    assert weather == costs.total_tokens - total(_with(TOOLS, web__get_weather=False)) > 10
    # A tool not offered: what ticking it would add.
    assert costs.tool_tokens[("files", "read")] == total(_with(TOOLS, files__read=True)) - costs.total_tokens > 5
    # A server: what turning it off gives back; the other's tools and the template's frame stay.
    web = costs.server_tokens["web"]
    assert web == costs.total_tokens - total(_with(TOOLS, web__get_weather=False, web__search=False))
    assert costs.server_tokens["files"] + web < costs.total_tokens  # the frame is in neither alone
    # Nothing allowed: no server costs anything, and each tool says what ticking it would add.
    none = tool_costs(_with(TOOLS, web__get_weather=False, web__search=False, files__search=False), counter.count)
    assert none.total_tokens == 0 and none.server_tokens == {"web": 0, "files": 0}
    assert none.tool_tokens[("web", "get_weather")] > weather  # alone, it brings the template's frame


def test_a_template_that_shows_no_tools_costs_nothing(embedded_model: Path) -> None:
    costs = tool_costs(TOOLS, ToolsCounter(embedded_model).count)  # SmolLM2's own template
    assert not costs.described and costs.total_tokens == 0
    assert set(costs.tool_tokens.values()) == {0} and set(costs.server_tokens.values()) == {0}


def test_without_a_model_the_costs_are_an_estimate_that_says_so() -> None:
    costs = tool_costs(TOOLS, estimate_tools_tokens, estimate="no model is selected to count with")
    assert costs.estimate == "no model is selected to count with" and costs.described
    api = ToolCatalog.build(TOOLS).api_tools()
    assert costs.total_tokens == math.ceil(len(json.dumps(api, ensure_ascii=False)) / 3)
    assert costs.tool_tokens[("web", "get_weather")] > 0 and costs.tool_tokens[("files", "read")] > 0
