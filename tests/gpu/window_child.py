"""Run with VRAMPILOT_SOFTWARE_GPU=1 and QT_QPA_PLATFORM=offscreen: open the app's window as
launch_gui builds it, on the model at argv[3] (a returning user's last model), wait for the plan,
load the model, save a screenshot to argv[1], ask a question, show the Meters tab once it is
answered and save a screenshot to argv[2], and print what the window planned and loaded and what
its meters read (JSON)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import QApplication

from vrampilot.ui.app_context import build_context
from vrampilot.ui.chat.controller import ChatState
from vrampilot.ui.main_window import MainWindow
from vrampilot.ui.services import build_services
from vrampilot.ui.theme import apply_theme


def wait(app: QApplication, until: Callable[[], object], cpu_s: float) -> bool:
    """Turns of the event loop until `until()`, bounded by work (tests/waits.py), not the clock."""
    from tests import waits

    def turn() -> None:
        app.processEvents()
        time.sleep(0.02)

    return waits.holds(turn, until, cpu_s=cpu_s)


def main() -> int:
    app = QApplication(sys.argv[:1])
    apply_theme(app)
    ctx = build_context()
    # The model at argv[3], as a returning user's last one: the window opens on it.
    model = Path(sys.argv[3])
    ctx.library.add_file(model)
    ctx.prefs.set_last_model(model)
    w = MainWindow(ctx, build_services(ctx))
    w.resize(1500, 950)
    w.show()
    try:
        if not wait(app, lambda: w.plans.plan is not None and w.plans.plan.spec.path == model, cpu_s=240):
            print(json.dumps({"error": "no plan"}))
            return 1
        w.plans.load()
        if not wait(app, lambda: w.plans.is_loaded(), cpu_s=600):
            print(json.dumps({"error": "not loaded"}))
            return 1
        # The meters' samples since the load, drawn: the panel's listener runs before this one.
        drawn: list[object] = []
        w.meters_panel.feed.add_listener(drawn.append)
        wait(app, lambda: len(drawn) >= 2, cpu_s=60)
        w.grab().save(sys.argv[1])
        # A short reply: lavapipe generates a few tokens a second, and the test needs a reply, not its length.
        w.chat_view.sampling.set_params(replace(w.chat_view.sampling.params(), max_tokens=6, seed=1))
        w.chat_view.input.setPlainText("Say hello.")
        w.chat_view.send_button.click()
        if not wait(app, lambda: w.chats.state is ChatState.IDLE and len(w.chat_view.messages()) == 2, cpu_s=600):
            print(json.dumps({"error": "no reply"}))
            return 1
        w.right_tabs.setCurrentWidget(w.meters_panel)
        shown = len(drawn)
        wait(app, lambda: len(drawn) >= shown + 2, cpu_s=60)  # the tab shown, drawn with new samples
        w.grab().save(sys.argv[2])
        p = w.plans.plan
        assert p is not None
        bars = [b.measured_bar.data() for b in w.meters_panel._gpu_bars.values()]
        print(
            json.dumps(
                {
                    "n_gpu_layers": p.settings.n_gpu_layers,
                    "n_layer": p.spec.n_layer,
                    "target": p.target.description,
                    "devices": [g.buffer_name for g in p.target.gpus],
                    "vram_title": w.meters_panel.vram_box.title(),
                    "status_bar": w.meters_status.label.text(),
                    "vram_captions": [b.caption for b in bars if b is not None],
                }
            )
        )
        return 0
    finally:
        w.shutdown()
        ctx.close()


if __name__ == "__main__":
    raise SystemExit(main())
