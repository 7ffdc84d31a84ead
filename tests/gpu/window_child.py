"""Run with VRAMPILOT_SOFTWARE_GPU=1 and QT_QPA_PLATFORM=offscreen: open the app's window as
launch_gui builds it, wait for the plan, load the model, save a screenshot to argv[1] and print
what the window planned and loaded (JSON)."""

from __future__ import annotations

import json
import sys
import time

from PySide6.QtWidgets import QApplication

from vrampilot.ui.context import build_context
from vrampilot.ui.main_window import MainWindow
from vrampilot.ui.theme import apply_theme


def wait(app: QApplication, until: object, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        if until():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def main() -> int:
    app = QApplication(sys.argv[:1])
    apply_theme(app)
    ctx = build_context()
    w = MainWindow(ctx)
    w.resize(1500, 950)
    w.show()
    try:
        if not wait(app, lambda: w.plans.plan is not None, 120):
            print(json.dumps({"error": "no plan"}))
            return 1
        w.plans.load()
        if not wait(app, lambda: w.plans.is_loaded(), 300):
            print(json.dumps({"error": "not loaded"}))
            return 1
        wait(app, lambda: False, 1.5)  # the meters' first samples and the panel's repaint
        w.grab().save(sys.argv[1])
        p = w.plans.plan
        assert p is not None
        print(json.dumps({"n_gpu_layers": p.settings.n_gpu_layers, "n_layer": p.spec.n_layer,
                          "target": p.target.description, "devices": [g.buffer_name for g in p.target.gpus]}))  # fmt: skip
        return 0
    finally:
        w.shutdown()
        ctx.close()


if __name__ == "__main__":
    raise SystemExit(main())
