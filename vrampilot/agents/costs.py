"""What the MCP tools cost in every prompt, in the model's tokens: all the allowed tools together
(what the plan counts), each server, and each tool.

A tool's or a server's cost is what it changes: the tokens that leave every prompt if it is
unticked, or that an unticked tool would add if it were ticked. That is the number a user choosing
what to allow needs, and it is measured, not apportioned: each set is rendered by the model's own
template and counted by its tokenizer (engine/tool_tokens.py), with the other servers' tools as
they are. So the template's own text around the tools (a "# Tools" header) is in the cost of a
server or a tool only when it is the last one allowed; the parts do not add up to the whole.

Without a model that can count (none selected, or its template fails on the tools) the costs are
an estimate from the schemas' characters, and say so (`estimate`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vrampilot.agents.catalog import ToolCatalog
from vrampilot.agents.client import ToolInfo
from vrampilot.engine import ToolsTokens

CHARS_PER_TOKEN = 3  # JSON schemas and English descriptions, roughly (the estimate only)

Counter = Callable[[Sequence[dict[str, Any]]], ToolsTokens]


@dataclass(frozen=True)
class ToolCosts:
    """Tokens of every prompt. `tool_tokens` and `server_tokens` are what each adds (or, for a tool
    not allowed, would add); `total_tokens` is what all the allowed tools take together."""

    total_tokens: int
    server_tokens: Mapping[str, int] = field(default_factory=dict)
    tool_tokens: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (server, tool) ->
    described: bool = True  # False: the template does not show tools (they cost nothing, no call comes)
    # Why the numbers are an estimate from characters ("" when the model counted them).
    estimate: str = ""

    def share_of(self, n_ctx: int) -> float:
        return self.total_tokens / n_ctx if n_ctx > 0 else 0.0


def estimate_tools_tokens(tools: Sequence[dict[str, Any]]) -> ToolsTokens:
    """The tools' JSON at about CHARS_PER_TOKEN characters a token: a count without a model."""
    if not tools:
        return ToolsTokens(0, False, 0)
    tokens = math.ceil(len(json.dumps(list(tools), ensure_ascii=False)) / CHARS_PER_TOKEN)
    return ToolsTokens(tokens, True, tokens)


def tool_costs(tools: Sequence[ToolInfo], count: Counter, *, estimate: str = "") -> ToolCosts:
    """The costs of `tools` (every tool the servers list, `allowed` as the config says) with
    `count` (a ToolsCounter's, or estimate_tools_tokens with `estimate` saying why)."""
    tools = list(tools)
    shown: list[bool] = []  # per set of tools counted: whether the template showed them

    def cost(variant: Sequence[ToolInfo]) -> ToolsTokens:
        # Named as the catalog names them for the model (a clash of names renames both tools).
        api = ToolCatalog.build(variant).api_tools()
        counted = count(api)
        if api:
            shown.append(counted.described)
        return counted

    whole = cost(tools)
    total = whole.tokens
    by_tool: dict[tuple[str, str], int] = {}
    for i, t in enumerate(tools):
        flipped = [*tools[:i], replace(t, allowed=not t.allowed), *tools[i + 1 :]]
        other = cost(flipped).tokens
        by_tool[(t.server, t.name)] = max(0, total - other if t.allowed else other - total)
    by_server: dict[str, int] = {}
    for server in dict.fromkeys(t.server for t in tools):
        if not any(t.allowed for t in tools if t.server == server):
            by_server[server] = 0
            continue
        without = [replace(t, allowed=False) if t.server == server else t for t in tools]
        by_server[server] = max(0, total - cost(without).tokens)
    return ToolCosts(total, by_server, by_tool, described=any(shown) or not shown, estimate=estimate)
