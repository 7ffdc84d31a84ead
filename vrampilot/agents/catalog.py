"""The tools as the model sees them: one name per tool across every server, in the OpenAI `tools`
shape llama-server takes.

A tool keeps its own name when no other server lists the same one; two servers with a `search`
each give `github__search` and `docs__search`. Names are cut to the API's alphabet (letters,
digits, `_` and `-`, 64 characters), since a server may name a tool in any way.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vrampilot.agents.client import ToolInfo

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
NAME_CHARS = 64


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name)[:NAME_CHARS] or "tool"


@dataclass(frozen=True)
class ToolCatalog:
    """`offered`: model name -> the tool, for tools the model may call; `refused`: tools a server
    lists that the config does not allow (a call to one is told so, not "unknown")."""

    offered: Mapping[str, ToolInfo]
    refused: Mapping[str, ToolInfo]

    @classmethod
    def build(cls, tools: Iterable[ToolInfo]) -> ToolCatalog:
        tools = list(tools)
        counts = Counter(t.name for t in tools)
        offered: dict[str, ToolInfo] = {}
        refused: dict[str, ToolInfo] = {}
        for t in tools:
            name = _safe(t.name if counts[t.name] == 1 else f"{t.server}__{t.name}")
            (offered if t.allowed else refused)[name] = t
        return cls(offered, refused)

    def __bool__(self) -> bool:
        return bool(self.offered)

    def api_tools(self) -> list[dict[str, Any]]:
        """The `tools` of a chat completion request."""
        return [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": t.description,
                    "parameters": dict(t.input_schema) or {"type": "object", "properties": {}},
                },
            }
            for name, t in self.offered.items()
        ]

    def find(self, model_name: str) -> ToolInfo | None:
        return self.offered.get(model_name)

    def matches(self, model_name: str, pattern: str) -> bool:
        """`--allow-tool` names a tool as the model sees it, by its own name, or as SERVER/TOOL."""
        t = self.offered.get(model_name)
        return t is not None and pattern in (model_name, t.name, f"{t.server}/{t.name}")
