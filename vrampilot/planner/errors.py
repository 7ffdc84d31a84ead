"""The planner's error, its one home: a root type, so the memory model's helpers
(memory/placement.py) refuse a bad placement with the same error the search refuses bad pins with."""

from __future__ import annotations

from vrampilot.errors import UserError


class PlanError(UserError, ValueError):
    """Pins that cannot make a plan (a cache type the head size rules out, ...); the message says why."""
