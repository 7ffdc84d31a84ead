"""The second half of the composition root: the long-lived services the window's parts share.

`build_context` (app_context.py) builds storage and the worker threads; `build_services` builds, on top
of it, what the window and its controllers use but do not own: the sampler and the meters feed
over it (the meters tab, the status bar and the Server tab read one), the speed controller (the
plan controller applies what it measures) and the Hub controller (the Hub tab presents it). The
window receives them and builds none, so a test builds a controller with these on a temporary
folder without a window.
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from vrampilot.meters import Sampler
from vrampilot.ui.app_context import AppContext
from vrampilot.ui.hub.controller import HubController
from vrampilot.ui.meters.feed import MetersFeed
from vrampilot.ui.plan.speed_controller import SpeedController


class Services(QObject):
    """Holds the services and parents their Qt objects: a feed without a parent stops its timer
    once no panel listens (meters_feed._stop_if_orphaned), which a feed built before its panels
    must not do."""

    def __init__(self, sampler: Sampler, ctx: AppContext) -> None:
        super().__init__()
        self.sampler = sampler
        self.meters = MetersFeed(sampler, self)
        self.speed = SpeedController(ctx, self)
        # The window sets the target the plan controller detected, so the Hub does not detect one.
        self.hub = HubController(ctx.tasks, detect=False, parent=self)


def build_services(ctx: AppContext) -> Services:
    """After `build_context`, before the window: the sampler starts sampling here."""
    return Services(Sampler(), ctx)
