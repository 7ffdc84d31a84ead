"""The planner's error, in a module of its own: the memory model's helpers (planner/placement.py)
refuse bad placements with it, and plan.py, which imports the memory model, exports it too."""

from __future__ import annotations

from vrampilot.errors import UserError


class PlanError(UserError, ValueError):
    """Pins that cannot make a plan (a cache type the head size rules out, ...); the message says why."""
