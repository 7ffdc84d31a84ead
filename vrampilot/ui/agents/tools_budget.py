"""The tools' share of the context, kept in the plan while the chat uses tools.

With "Use tools" on, every prompt carries the allowed tools' schemas, rendered by the model's own
template (vrampilot.engine.tool_tokens): the plan's context budget shows them and warns past a
quarter of the context (planner/context_budget.py). Counting loads the model's vocabulary, so it
runs off the GUI thread, once per model and set of tools; switching tools off takes them out of
the plan again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject

from vrampilot.engine import ToolsTokens, count_tools_tokens
from vrampilot.ui.agents.controller import AgentsController
from vrampilot.ui.context import AppContext
from vrampilot.ui.plan_controller import PlanController


class ToolsBudget(QObject):
    def __init__(
        self, ctx: AppContext, agents: AgentsController, plans: PlanController, *, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.ctx, self.agents, self.plans = ctx, agents, plans
        self.on = False
        self._counted: dict[tuple[Path, str], ToolsTokens] = {}
        self.last: ToolsTokens | None = None  # the count the plan shows now (None: no tools in it)
        agents.servers_changed.connect(self.update)
        plans.plan_shown.connect(lambda _plan: self.update())

    def set_on(self, on: bool) -> None:
        self.on = on
        self.update()

    def update(self) -> None:
        model = self.plans.model_path
        tools = self.agents.catalog().api_tools() if self.on else []
        if model is None or not tools:
            self._show(None)
            return
        key = (Path(model), json.dumps(tools, sort_keys=True))
        known = self._counted.get(key)
        if known is not None:
            self._show(known)
            return

        def count(_handle: Any) -> ToolsTokens:
            return count_tools_tokens(key[0], tools)

        def done(result: ToolsTokens) -> None:
            self._counted[key] = result
            self.update()

        def failed(exc: BaseException) -> None:
            # A template that fails on tools fails the reply too, which says why; the plan keeps
            # what it showed.
            self.ctx.tasks.unhandled_error.emit(exc)

        self.ctx.tasks.submit(count, done=done, failed=failed, key="tools-tokens", owner=self)

    def _show(self, counted: ToolsTokens | None) -> None:
        if counted is not None and not counted.described and counted != self.last:
            self.agents.status.emit(
                "This model's chat template does not describe tools: it is sent them but never calls one"
                " (docs/agents.md, Models that can call tools)"
            )
        self.last = counted
        self.plans.set_tools_tokens(counted.tokens if counted is not None else None)
