"""Entry point of the PyInstaller bundle: the same `main` as the `vrampilot` console script.

One packaging-only hook: `VRAMPILOT_SMOKE_SCREENSHOT=PATH` makes the GUI save a picture of its main
window after `VRAMPILOT_SMOKE_SECONDS` (default 4) and quit, so `make package-test` can prove the
*bundle* draws its window offscreen. Without that variable the bundle behaves exactly like
`vrampilot`. (It lives here, not in vrampilot/, because only the packaging smoke test needs it.)
If the app has not ended `SMOKE_EXIT_S` after the shot was due, every thread's stack is written to
`PATH.threads.txt` and the process ends with status 1, so a hang at quit fails the smoke test
with where it hung (a windowed Windows program has no stderr to say it on).
"""

from __future__ import annotations

import faulthandler
import os
import sys

SMOKE_EXIT_S = 60


def _arm_smoke_screenshot(path: str, seconds: float) -> None:
    """Create the QApplication first (launch_gui reuses an existing one) and queue the shot."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])

    def shoot() -> None:
        windows = [w for w in app.topLevelWidgets() if w.isVisible()]
        if windows:
            biggest = max(windows, key=lambda w: w.width() * w.height())
            ok = biggest.grab().save(path)
            print(f"vrampilot: smoke screenshot {'saved to' if ok else 'FAILED for'} {path}", file=sys.stderr)
        else:
            print("vrampilot: smoke screenshot: no visible window", file=sys.stderr)
        app.quit()

    QTimer.singleShot(int(seconds * 1000), shoot)
    # Armed now, not in `shoot`: a thread that holds the GIL and never returns (a C call that
    # blocks) stops `shoot` too, while faulthandler's own thread needs no GIL to write the stacks.
    stacks = open(path + ".threads.txt", "w", encoding="utf-8")  # noqa: SIM115  # open until the process ends
    faulthandler.dump_traceback_later(seconds + SMOKE_EXIT_S, exit=True, file=stacks)


def run() -> int:
    from vrampilot.__main__ import main

    shot = os.environ.get("VRAMPILOT_SMOKE_SCREENSHOT")
    if shot and (len(sys.argv) == 1 or sys.argv[1] == "gui"):
        _arm_smoke_screenshot(shot, float(os.environ.get("VRAMPILOT_SMOKE_SECONDS", "4")))
    return main()


if __name__ == "__main__":
    sys.exit(run())
