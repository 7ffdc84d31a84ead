"""What the MCP tools cost in every prompt, counted for the selected model: shown per tool and per
server in the MCP servers tab, and kept in the plan while the chat uses tools.

With "Use tools" on, every prompt carries the allowed tools' schemas, rendered by the model's own
template (vrampilot.engine.tool_tokens): the plan's context budget shows them and warns past a
quarter of the context (planner/context_budget.py). Counting loads the model's vocabulary (a
vocab-only load) and renders the template once per tool and server (agents/costs.py), so it runs
off the GUI thread, once per model and set of tools; switching tools off takes them out of the
plan again. Without a model that can count, the MCP tab shows an estimate, labelled as one, and
the plan gets nothing from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from vrampilot.agents import ToolInfo
from vrampilot.agents.costs import ToolCosts, estimate_tools_tokens, tool_costs
from vrampilot.engine import ToolsCounter
from vrampilot.log import describe_error
from vrampilot.ui.agents.controller import AgentsController
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.plan.controller import PlanController


class ToolsBudget(QObject):
    costs_changed = Signal()  # `costs` or the plan's context changed (the MCP tab's numbers)

    def __init__(
        self, ctx: AppContext, agents: AgentsController, plans: PlanController, *, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.ctx, self.agents, self.plans = ctx, agents, plans
        self.on = False
        self._counted: dict[tuple[Path | None, str], ToolCosts] = {}
        self.costs: ToolCosts | None = None  # what the listed tools cost (None: no tool listed)
        self._warned: tuple[Path | None, str] | None = None  # the model and tools "never calls" was said for
        agents.servers_changed.connect(self.update)
        plans.plan_shown.connect(lambda _plan: self.update())

    def set_on(self, on: bool) -> None:
        self.on = on
        self.update()

    def n_ctx(self) -> int | None:
        """The context of the plan shown (what the tools' share is of)."""
        plan = self.plans.plan
        return plan.settings.n_ctx if plan is not None else None

    def model_name(self) -> str | None:
        return self.plans.model_path.name if self.plans.model_path is not None else None

    def update(self) -> None:
        model = Path(self.plans.model_path) if self.plans.model_path is not None else None
        tools = self.agents.listed_tools()
        if not tools:
            self._show(None, None)
            return
        key = (model, json.dumps([_key(t) for t in tools]))
        known = self._counted.get(key)
        if known is not None:
            self._show(known, key)
            return
        if model is None:
            self._counted[key] = tool_costs(tools, estimate_tools_tokens, estimate="no model is selected to count with")
            self.update()
            return

        def count(_handle: Any) -> ToolCosts:
            return tool_costs(tools, ToolsCounter(model).count)

        def done(result: ToolCosts) -> None:
            self._counted[key] = result
            self.update()

        def failed(exc: BaseException) -> None:
            # A template that fails on tools fails the reply too, which says why; here the costs
            # are estimated, and said to be, and the plan keeps what it showed.
            why = f"{model.name} could not count them: {describe_error(exc)}"
            self._counted[key] = tool_costs(tools, estimate_tools_tokens, estimate=why)
            self.update()

        self.ctx.tasks.submit(count, done=done, failed=failed, key="tools-tokens", owner=self)

    def _show(self, costs: ToolCosts | None, key: tuple[Path | None, str] | None) -> None:
        if self.on and costs is not None and not costs.estimate and not costs.described and key != self._warned:
            self._warned = key
            self.agents.status.emit(
                "This model's chat template does not describe tools: it is sent them but never calls one"
                " (docs/agents.md, Models that can call tools)"
            )
        self.costs = costs
        self.costs_changed.emit()
        if costs is None or not costs.estimate:
            self.plans.set_tools_tokens(costs.total_tokens if self.on and costs is not None else None)


def _key(t: ToolInfo) -> tuple[str, str, bool, str, str]:
    """What a tool's cost depends on."""
    return (t.server, t.name, t.allowed, t.description, json.dumps(dict(t.input_schema), sort_keys=True))
