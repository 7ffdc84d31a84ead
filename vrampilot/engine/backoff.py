"""What to try when llama.cpp cannot allocate a plan: the cheapest alternative that needs less memory
(the rule, and what it may change, are planner/search/alternatives.py's).

Only these changes are allowed, as the user would expect from "it did not fit": fewer GPU
layers, a smaller context, or (a mixture of experts) more layers' experts in RAM. Their cost is
what the user loses, as fractions: predicted decode speed for layers and experts, context length
for context. The plan's own alternatives carry both numbers.
Everything else the failed plan chose stays as it was: re-planning freely at the smaller size
would pick a larger KV cache type, and memory would barely drop from one step to the next.
"""

from __future__ import annotations

from dataclasses import dataclass

from vrampilot.planner.errors import PlanError
from vrampilot.planner.plan import Plan
from vrampilot.planner.search.alternatives import PINNABLE, changed_pins, cheapest_smaller, describe_change
from vrampilot.planner.search.draft import replan_keeping_draft


@dataclass(frozen=True)
class BackoffStep:
    plan: Plan
    change: str  # e.g. "GPU layers 31 -> 30"


def next_backoff(plan: Plan) -> BackoffStep | None:
    """The plan to try after `plan` failed to allocate, or None when nothing smaller is on offer."""
    best = cheapest_smaller(plan)
    if best is None:
        return None
    # Hold everything the failed plan chose, and pin what the back-off changes.
    held = {name: getattr(plan.settings, name) for name in PINNABLE}
    try:
        new_plan = replan_keeping_draft(plan, **{**held, **changed_pins(plan.settings, best.settings)})
    except PlanError:
        # A held placement that no longer fits anywhere (more experts in RAM than RAM allows):
        # nothing smaller on offer, so the allocation's own error stands.
        return None
    # The re-plan may re-choose unpinned settings; what was loaded is what the user is told about.
    return BackoffStep(new_plan, describe_change(plan.settings, new_plan.settings))
